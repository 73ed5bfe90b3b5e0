#include "core/dtype.h"

#include <array>
#include <cmath>
#include <cstring>

namespace kfab {

namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
  bool is_float;
};

constexpr std::array<DTypeInfo, 9> kInfo = {{
    {DType::F32, "f32", 4, true},
    {DType::F16, "f16", 2, true},
    {DType::BF16, "bf16", 2, true},
    {DType::F64, "f64", 8, true},
    {DType::I32, "i32", 4, false},
    {DType::I64, "i64", 8, false},
    {DType::I8, "i8", 1, false},
    {DType::U8, "u8", 1, false},
    {DType::Bool, "bool", 1, false},
}};

const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }

}  // namespace

std::string_view dtype_name(DType t) { return info(t).name; }
size_t dtype_size(DType t) { return info(t).size; }
bool dtype_is_float(DType t) { return info(t).is_float; }
std::string_view dtype_accepted() { return "f32, f16, bf16, f64, i32, i64, i8, u8, bool"; }

std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& i : kInfo)
    if (i.name == s) return i.type;
  struct Alias {
    std::string_view name;
    DType type;
  };
  static constexpr std::array<Alias, 11> kAliases = {{{"float32", DType::F32},
                                                      {"float", DType::F32},
                                                      {"float16", DType::F16},
                                                      {"half", DType::F16},
                                                      {"bfloat16", DType::BF16},
                                                      {"float64", DType::F64},
                                                      {"double", DType::F64},
                                                      {"int32", DType::I32},
                                                      {"int64", DType::I64},
                                                      {"int8", DType::I8},
                                                      {"uint8", DType::U8}}};
  for (const auto& a : kAliases)
    if (a.name == s) return a.type;
  return std::nullopt;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // subnormal half or zero: round to nearest even in units of 2^-24
    float af;
    const uint32_t a = abs;
    std::memcpy(&af, &a, 4);
    const float scaled = af * 16777216.0f;  // 2^24
    const auto q = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | q);
  }
  // normal: rebias exponent 127 -> 15 and round the 13 dropped mantissa bits to nearest even
  uint32_t m = abs - 0x38000000u;
  const uint32_t round = 0xfffu + ((m >> 13) & 1u);
  m += round;
  return static_cast<uint16_t>(sign | (m >> 13));
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(man), -24);
    std::memcpy(&out, &v, 4);
    out |= sign;
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (man << 13);
  } else {
    out = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bfloat16_to_float(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

double load_as_double(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(data)[i];
    case DType::F16: return half_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::BF16: return bfloat16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::F64: return static_cast<const double*>(data)[i];
    case DType::I32: return static_cast<const int32_t*>(data)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DType::I8: return static_cast<const int8_t*>(data)[i];
    case DType::U8: return static_cast<const uint8_t*>(data)[i];
    case DType::Bool: return static_cast<const uint8_t*>(data)[i];
  }
  return 0.0;
}

void store_from_double(void* data, DType t, size_t i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(data)[i] = static_cast<float>(v); return;
    case DType::F16: static_cast<uint16_t*>(data)[i] = float_to_half(static_cast<float>(v)); return;
    case DType::BF16: static_cast<uint16_t*>(data)[i] = float_to_bfloat16(static_cast<float>(v)); return;
    case DType::F64: static_cast<double*>(data)[i] = v; return;
    case DType::I32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(std::llround(v)); return;
    case DType::I64: static_cast<int64_t*>(data)[i] = std::llround(v); return;
    case DType::I8: static_cast<int8_t*>(data)[i] = static_cast<int8_t>(std::llround(v)); return;
    case DType::U8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(std::llround(v)); return;
    case DType::Bool: static_cast<uint8_t*>(data)[i] = v != 0.0 ? 1 : 0; return;
  }
}

}  // namespace kfab
