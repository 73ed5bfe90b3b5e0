#include "report/table.h"

#include <algorithm>
#include <cctype>

namespace kfab {

static bool numeric(const std::string& s) {
  if (s.empty() || s == "-") return true;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'x' || c == '%';
  });
}

std::string Table::render() const {
  const size_t cols = header_.size();
  std::vector<size_t> width(cols, 0);
  std::vector<bool> right(cols, true);
  for (size_t c = 0; c < cols; ++c) width[c] = header_[c].size();
  for (const auto& r : rows_)
    for (size_t c = 0; c < cols && c < r.size(); ++c) {
      width[c] = std::max(width[c], r[c].size());
      right[c] = right[c] && numeric(r[c]);
    }
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t c = 0; c < cols; ++c) {
      const std::string cell = c < r.size() ? r[c] : "";
      const std::string pad(width[c] - std::min(width[c], cell.size()), ' ');
      s += right[c] ? pad + cell : cell + (c + 1 < cols ? pad : "");
      if (c + 1 < cols) s += "  ";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = line(header_);
  for (const auto& r : rows_) out += line(r);
  return out;
}

}  // namespace kfab
