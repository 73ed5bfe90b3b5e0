#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"

namespace kfab {

TEST(DType, ParsesManifestNamesAndAliases) {
  EXPECT_EQ(parse_dtype("f32"), DType::F32);
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_EQ(parse_dtype("bool"), DType::Bool);
  EXPECT_EQ(parse_dtype("float16"), DType::F16);
  EXPECT_EQ(parse_dtype("int64"), DType::I64);
  EXPECT_FALSE(parse_dtype("f31").has_value());
  EXPECT_FALSE(parse_dtype("").has_value());
}

TEST(DType, NamesRoundTripAndSizesMatchTheAbi) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::I8, DType::U8, DType::Bool})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(static_cast<int>(DType::Bool), KFAB_BOOL);
  EXPECT_TRUE(dtype_is_float(DType::BF16));
  EXPECT_FALSE(dtype_is_float(DType::U8));
}

TEST(DType, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);                 // overflow to inf
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie, to even
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, to even (up)
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  for (float f : {0.5f, -3.25f, 1024.0f, 6.103515625e-05f}) EXPECT_EQ(half_to_float(float_to_half(f)), f);
}

TEST(DType, Bfloat16KeepsTheExponentRange) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(3.0e38f)), bfloat16_to_float(0x7f62));
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(-0.5f)), -0.5f);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(NAN))));
}

TEST(DType, LoadAndStoreThroughDouble) {
  int64_t i64[2];
  store_from_double(i64, DType::I64, 1, -7.0);
  EXPECT_EQ(i64[1], -7);
  uint8_t b[1];
  store_from_double(b, DType::Bool, 0, 0.25);
  EXPECT_EQ(load_as_double(b, DType::Bool, 0), 1.0);
  uint16_t h[1];
  store_from_double(h, DType::F16, 0, 0.1);
  EXPECT_NEAR(load_as_double(h, DType::F16, 0), 0.1, 1e-4);
}

}  // namespace kfab
