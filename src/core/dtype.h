// Element types that hfx reads from checkpoints, computes with, and writes to artifacts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hfx {

// I4 / U4 are 4-bit integers packed two per byte, element 2i in the low nibble of byte i (ONNX INT4 /
// UINT4, OpenVINO i4 / u4): only quantized weights use them, never computed values.
enum class DType : uint8_t { F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool, I4, U4 };

// Bytes per element; 1 for the packed 4-bit types, whose tensors take dtype_nbytes(t, n) = ceil(n / 2).
size_t dtype_size(DType t);
// Bits per element (4 for I4 / U4).
size_t dtype_bits(DType t);
// Bytes of `numel` elements, packed for sub-byte types.
size_t dtype_nbytes(DType t, size_t numel);
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

// Converts `count` elements between float types (F32, F16, BF16, F64) and integer types by value
// (I4 / U4 unpacked or packed as they are read or written).
void convert_elements(DType from, const void* src, DType to, void* dst, size_t count);

}  // namespace hfx
