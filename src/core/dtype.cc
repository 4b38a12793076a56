#include "core/dtype.h"

#include <cstring>
#include <vector>

#include "core/error.h"

namespace hfx {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: return 2;
    case DType::I8: case DType::U8: case DType::Bool: case DType::I4: case DType::U4: return 1;
  }
  return 0;
}

size_t dtype_bits(DType t) { return t == DType::I4 || t == DType::U4 ? 4 : 8 * dtype_size(t); }

size_t dtype_nbytes(DType t, size_t numel) {
  return dtype_bits(t) == 4 ? (numel + 1) / 2 : numel * dtype_size(t);
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F64: return "f64";
    case DType::I64: return "i64";
    case DType::I32: return "i32";
    case DType::I16: return "i16";
    case DType::I8: return "i8";
    case DType::U8: return "u8";
    case DType::Bool: return "bool";
    case DType::I4: return "i4";
    case DType::U4: return "u4";
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors(std::string_view s) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  if (s == "F64") return DType::F64;
  if (s == "I64") return DType::I64;
  if (s == "I32") return DType::I32;
  if (s == "I16") return DType::I16;
  if (s == "I8") return DType::I8;
  if (s == "U8") return DType::U8;
  if (s == "BOOL") return DType::Bool;
  return std::nullopt;  // safetensors has no 4-bit types
}

std::optional<DType> dtype_from_name(std::string_view s) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32,
                  DType::I16, DType::I8, DType::U8, DType::Bool, DType::I4, DType::U4})
    if (dtype_name(t) == s) return t;
  return std::nullopt;
}

bool is_float(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) { mant <<= 1; --exp; }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = int32_t((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 0x1f) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return uint16_t(sign);
    mant |= 0x800000;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | (uint32_t(exp) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return uint16_t(half);
}

float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);  // quiet NaN
  uint32_t rounding = 0x7fff + ((x >> 16) & 1);
  return uint16_t((x + rounding) >> 16);
}

namespace {

double load_as_double(DType t, const uint8_t* p) {
  switch (t) {
    case DType::F32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::F64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::F16: { uint16_t v; std::memcpy(&v, p, 2); return f16_to_f32(v); }
    case DType::BF16: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_f32(v); }
    case DType::I64: { int64_t v; std::memcpy(&v, p, 8); return double(v); }
    case DType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::I16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::I8: return double(int8_t(*p));
    case DType::U8: case DType::Bool: return double(*p);
    case DType::I4: case DType::U4: break;  // packed: convert_elements reads nibbles itself
  }
  return 0;
}

void store_from_double(DType t, double v, uint8_t* p) {
  switch (t) {
    case DType::F32: { float f = float(v); std::memcpy(p, &f, 4); return; }
    case DType::F64: std::memcpy(p, &v, 8); return;
    case DType::F16: { uint16_t h = f32_to_f16(float(v)); std::memcpy(p, &h, 2); return; }
    case DType::BF16: { uint16_t h = f32_to_bf16(float(v)); std::memcpy(p, &h, 2); return; }
    case DType::I64: { int64_t i = int64_t(v); std::memcpy(p, &i, 8); return; }
    case DType::I32: { int32_t i = int32_t(v); std::memcpy(p, &i, 4); return; }
    case DType::I16: { int16_t i = int16_t(v); std::memcpy(p, &i, 2); return; }
    case DType::I8: *p = uint8_t(int8_t(v)); return;
    case DType::U8: *p = uint8_t(v); return;
    case DType::Bool: *p = v != 0 ? 1 : 0; return;
    case DType::I4: case DType::U4: return;  // packed: convert_elements writes nibbles itself
  }
}

bool is_4bit(DType t) { return t == DType::I4 || t == DType::U4; }

// Element i of a packed 4-bit tensor: the low nibble of byte i / 2 for even i, the high one for odd i.
int nibble_at(DType t, const uint8_t* p, size_t i) {
  const int v = (p[i / 2] >> (4 * (i % 2))) & 0xF;
  return t == DType::I4 && v >= 8 ? v - 16 : v;
}
void set_nibble(uint8_t* p, size_t i, int v) {
  const int shift = 4 * int(i % 2);
  p[i / 2] = uint8_t((p[i / 2] & ~(0xF << shift)) | ((v & 0xF) << shift));
}

}  // namespace

void convert_elements(DType from, const void* src, DType to, void* dst, size_t count) {
  if (count == 0) return;  // an empty tensor's data may be null, which memcpy must not be given
  auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (from == to) {
    std::memcpy(d, s, dtype_nbytes(from, count));
    return;
  }
  if (is_4bit(from) || is_4bit(to)) {  // through int64: values are integers (floats truncate, as for i8)
    std::vector<int64_t> v(count);
    const size_t fs = dtype_size(from), ts = dtype_size(to);
    for (size_t i = 0; i < count; ++i)
      v[i] = is_4bit(from) ? nibble_at(from, s, i) : int64_t(load_as_double(from, s + fs * i));
    if (is_4bit(to)) {
      const int lo = to == DType::I4 ? -8 : 0, hi = to == DType::I4 ? 7 : 15;
      if (count % 2) d[count / 2] = 0;  // the unused high nibble of an odd count is zero
      for (size_t i = 0; i < count; ++i) {
        if (v[i] < lo || v[i] > hi)
          bad_input("converting to {}: {} is outside [{}, {}]", dtype_name(to), v[i], lo, hi);
        set_nibble(d, i, int(v[i]));
      }
    } else {
      for (size_t i = 0; i < count; ++i) store_from_double(to, double(v[i]), d + ts * i);
    }
    return;
  }
  // Fast paths for the conversions exports do over whole weights.
  if (to == DType::F32 && from == DType::BF16) {
    // bf16 is the top half of an f32: a shift, which the compiler vectorises (memcpy keeps it
    // alignment-free; a safetensors payload may start at any offset).
    for (size_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, s + 2 * i, 2);
      const uint32_t bits = uint32_t(h) << 16;
      std::memcpy(d + 4 * i, &bits, 4);
    }
    return;
  }
  if (to == DType::F32 && from == DType::F16) {
    for (size_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, s + 2 * i, 2);
      const float f = f16_to_f32(h);
      std::memcpy(d + 4 * i, &f, 4);
    }
    return;
  }
  // f32 -> f16 / bf16: an export's narrowed weights. The same rounding as the general path below
  // (a float through double and back is exact), without the per-element switch.
  if (from == DType::F32 && (to == DType::F16 || to == DType::BF16)) {
    const bool half = to == DType::F16;
    for (size_t i = 0; i < count; ++i) {
      float f;
      std::memcpy(&f, s + 4 * i, 4);
      const uint16_t h = half ? f32_to_f16(f) : f32_to_bf16(f);
      std::memcpy(d + 2 * i, &h, 2);
    }
    return;
  }
  if ((from == DType::F16 || from == DType::BF16) && (to == DType::F16 || to == DType::BF16)) {  // via f32, exact
    for (size_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, s + 2 * i, 2);
      const float f = from == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      h = to == DType::F16 ? f32_to_f16(f) : f32_to_bf16(f);
      std::memcpy(d + 2 * i, &h, 2);
    }
    return;
  }
  if (from == DType::I64 && to == DType::I64) return;
  const size_t fs = dtype_size(from), ts = dtype_size(to);
  for (size_t i = 0; i < count; ++i) store_from_double(to, load_as_double(from, s + fs * i), d + ts * i);
}

}  // namespace hfx
