#include "core/expr.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace kfab {

namespace {

class Parser {
 public:
  Parser(const std::string& text, const ShapeBinding* env) : s_(text), env_(env) {}

  Expected<double> parse() {
    double v = sum();
    skip_space();
    if (err_.empty() && pos_ != s_.size()) fail("unexpected '" + std::string(1, s_[pos_]) + "'");
    if (!err_.empty()) return make_error("expression \"" + s_ + "\": " + err_);
    return v;
  }

  std::vector<std::string> symbols;

 private:
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  void fail(std::string m) {
    if (err_.empty()) err_ = std::move(m);
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  double sum() {
    double v = product();
    for (;;) {
      if (eat('+')) v += product();
      else if (eat('-')) v -= product();
      else return v;
    }
  }

  double product() {
    double v = unary();
    for (;;) {
      if (eat('*')) {
        v *= unary();
      } else if (eat('/')) {
        const double d = unary();
        if (d == 0.0) fail("division by zero");
        else v /= d;
      } else if (eat('%')) {
        const double d = unary();
        if (d == 0.0) fail("modulo by zero");
        else v = std::fmod(v, d);
      } else {
        return v;
      }
    }
  }

  double unary() {
    if (eat('-')) return -unary();
    return atom();
  }

  double atom() {
    skip_space();
    if (pos_ >= s_.size()) {
      fail("unexpected end");
      return 0.0;
    }
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      const double v = sum();
      if (!eat(')')) fail("missing ')'");
      return v;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      const char* begin = s_.c_str() + pos_;
      char* end = nullptr;
      const double v = std::strtod(begin, &end);
      pos_ += static_cast<size_t>(end - begin);
      return v;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < s_.size() &&
             (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
        ++pos_;
      std::string name = s_.substr(start, pos_ - start);
      symbols.push_back(name);
      if (env_ == nullptr) return 1.0;
      auto it = env_->find(name);
      if (it == env_->end()) {
        fail("symbol " + name + " is not bound");
        return 0.0;
      }
      return static_cast<double>(it->second);
    }
    fail("unexpected '" + std::string(1, c) + "'");
    ++pos_;
    return 0.0;
  }

  const std::string& s_;
  const ShapeBinding* env_;
  size_t pos_ = 0;
  std::string err_;
};

}  // namespace

Expected<double> eval_expr(const std::string& text, const ShapeBinding& env) {
  Parser p(text, &env);
  return p.parse();
}

Expected<std::vector<std::string>> expr_symbols(const std::string& text) {
  Parser p(text, nullptr);
  auto r = p.parse();
  if (!r) return Unexpected{r.error()};
  return p.symbols;
}

}  // namespace kfab
