#pragma once
/// The writer the tuner's printers emit source through: statements at the current depth (two spaces
/// a level), preprocessor lines at column 0, blocks opened and closed in pairs. A printer says what
/// nests in what; the emitter keeps the columns, so a piece written once reads right at any depth.

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

namespace kfab {

class Emitter {
 public:
  explicit Emitter(int depth = 0) : depth_(depth) {}

  /// One line at the current depth; a preprocessor line (`#pragma unroll`) at column 0.
  Emitter& line(std::string_view s) {
    if (!s.empty() && s.front() != '#') out_.append(2 * static_cast<size_t>(depth_), ' ');
    out_.append(s);
    out_ += '\n';
    return *this;
  }
  template <class... A>
  Emitter& linef(fmt::format_string<A...> f, A&&... a) {
    return line(fmt::format(f, std::forward<A>(a)...));
  }
  /// `head {` (`{` alone for an empty head), then one level deeper.
  Emitter& open(std::string_view head) {
    line(head.empty() ? std::string("{") : std::string(head) + " {");
    ++depth_;
    return *this;
  }
  template <class... A>
  Emitter& openf(fmt::format_string<A...> f, A&&... a) {
    return open(fmt::format(f, std::forward<A>(a)...));
  }
  /// One level up, then `tail` (`}`, `} else {` reopens at the same depth with `reopen`).
  Emitter& close(std::string_view tail = "}") {
    --depth_;
    return line(tail);
  }
  Emitter& reopen(std::string_view s) {
    --depth_;
    line(s);
    ++depth_;
    return *this;
  }
  /// A statement nested under a head without braces (`for (...)` then one line).
  Emitter& nested(std::string_view head, std::string_view body) {
    line(head);
    ++depth_;
    line(body);
    --depth_;
    return *this;
  }
  /// Text as it is (a fixed kernel's header text, a block written at column 0 on purpose).
  Emitter& raw(std::string_view s) {
    out_.append(s);
    return *this;
  }
  Emitter& blank() {
    out_ += '\n';
    return *this;
  }
  Emitter& indent() {
    ++depth_;
    return *this;
  }
  Emitter& dedent() {
    --depth_;
    return *this;
  }

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  int depth_ = 0;
};

}  // namespace kfab
