#pragma once
/// Element types of the candidate ABI, their names in manifests and conversions to and from double.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kfab/candidate.h"

namespace kfab {

enum class DType : int32_t {
  F32 = KFAB_F32,
  F16 = KFAB_F16,
  BF16 = KFAB_BF16,
  F64 = KFAB_F64,
  I32 = KFAB_I32,
  I64 = KFAB_I64,
  I8 = KFAB_I8,
  U8 = KFAB_U8,
  Bool = KFAB_BOOL,
};

/// The manifest spelling: f32, f16, bf16, f64, i32, i64, i8, u8, bool.
std::string_view dtype_name(DType t);
/// Parses a manifest spelling; also accepts torch-style aliases (float32, half, bfloat16, int64, ...).
std::optional<DType> parse_dtype(std::string_view s);
/// The accepted spellings, for error messages.
std::string_view dtype_accepted();
size_t dtype_size(DType t);
bool dtype_is_float(DType t);

/// Reads element i of a buffer of type t as double.
double load_as_double(const void* data, DType t, size_t i);
/// Stores v (rounded or converted as the type requires) into element i.
void store_from_double(void* data, DType t, size_t i, double v);

uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bfloat16(float f);
float bfloat16_to_float(uint16_t h);

}  // namespace kfab
