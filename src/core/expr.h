#pragma once
/// Arithmetic expressions over shape symbols ("2*M*N + N", "(K+1)/2"), used in shapes and cost.
/// Grammar: sum := product (('+'|'-') product)*; product := unary (('*'|'/'|'%') unary)*;
/// unary := '-' unary | atom; atom := number | symbol | '(' sum ')'. Numbers may be 1e9 style.

#include <map>
#include <string>
#include <vector>

#include "core/expected.h"

namespace kfab {

using ShapeBinding = std::map<std::string, int64_t>;

/// Evaluates `text` with the symbols bound in `env`. An unbound symbol or a syntax error is an Error.
Expected<double> eval_expr(const std::string& text, const ShapeBinding& env);
/// The symbols `text` mentions, or the syntax error.
Expected<std::vector<std::string>> expr_symbols(const std::string& text);

}  // namespace kfab
