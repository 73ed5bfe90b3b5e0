#pragma once
/// Aligned plain-text tables for the terminal.

#include <string>
#include <vector>

namespace kfab {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  /// Columns separated by two spaces; a column is right-aligned when every cell in it looks numeric.
  std::string render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace kfab
