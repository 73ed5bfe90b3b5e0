#include <gtest/gtest.h>

#include "core/expr.h"

namespace kfab {

TEST(Expr, EvaluatesWithPrecedenceAndParentheses) {
  ShapeBinding env{{"M", 4}, {"N", 6}};
  EXPECT_EQ(*eval_expr("2*M*N + N", env), 54.0);
  EXPECT_EQ(*eval_expr("(M+N)/2", env), 5.0);
  EXPECT_EQ(*eval_expr("-M + 10 % 4", env), -2.0);
  EXPECT_EQ(*eval_expr("1e3*M", env), 4000.0);
  EXPECT_EQ(*eval_expr("  N  ", env), 6.0);
}

TEST(Expr, ReportsUnboundSymbolsAndSyntaxErrors) {
  ShapeBinding env{{"M", 4}};
  auto a = eval_expr("M*K", env);
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message.find("symbol K is not bound"), std::string::npos);
  EXPECT_FALSE(eval_expr("M*", env).has_value());
  EXPECT_FALSE(eval_expr("(M", env).has_value());
  EXPECT_FALSE(eval_expr("M/0", env).has_value());
  EXPECT_FALSE(eval_expr("M $ 2", env).has_value());
}

TEST(Expr, ListsSymbols) {
  auto s = expr_symbols("2*M*N + K");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, (std::vector<std::string>{"M", "N", "K"}));
  EXPECT_FALSE(expr_symbols("2*").has_value());
}

}  // namespace kfab
