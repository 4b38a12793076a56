// Element types that hfx reads from checkpoints, computes with, and writes to artifacts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hfx {

enum class DType : uint8_t { F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool };

// Bytes per element.
size_t dtype_size(DType t);
// Lower-case name used in messages and manifests: "f32", "bf16", "i64", ...
std::string_view dtype_name(DType t);
// safetensors spelling ("F32", "BF16", "I64", "BOOL", ...); nullopt when unknown.
std::optional<DType> dtype_from_safetensors(std::string_view s);
std::optional<DType> dtype_from_name(std::string_view s);
bool is_float(DType t);

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  // round to nearest even

// Converts `count` elements between float types (F32, F16, BF16, F64) and integer types by value.
void convert_elements(DType from, const void* src, DType to, void* dst, size_t count);

}  // namespace hfx
