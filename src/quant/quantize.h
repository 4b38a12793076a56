// Weight-only quantization of the right operand W[K, N] of `x @ W` (a Linear weight, transposed),
// and the precision options of an export (`hfx export --dtype ... --quantize ...`).
//
// Two layouts:
//   * blockwise (com.microsoft MatMulNBits): K split into blocks of `block` elements per column n.
//     data [N, k_blocks, block * bits / 8] (uint8; 4-bit values two per byte, element 2i in the low
//     nibble), scales [N * k_blocks], zero points [N, ceil(k_blocks * bits / 8)] (asym only; 4-bit
//     zero points two per byte, block 2j in the low nibble, an unused last nibble 8). Without zero points MatMulNBits takes
//     2^(bits-1). The numbers are those of ONNX Runtime's reference quantizer
//     (MlasQuantizeBlockwise, which `quantize_matmul_4bits` / `quantize_matmul_8bits` and
//     MatMulNBitsQuantizer call): sym: scale = -m / 2^(bits-1) with m the block's value of largest
//     magnitude (min on a tie), zp = 2^(bits-1); asym: min' = min(min, 0), max' = max(max, 0),
//     scale = (max' - min') / (2^bits - 1), zp = roundf(-min' / scale) clamped; then
//     q = clamp(roundf(v * (1 / scale) + zp), 0, 2^bits - 1), with the scale first rounded to its
//     stored dtype. roundf rounds halves away from zero (that is what ONNX Runtime does; it is not
//     QuantizeLinear's half-to-even), so hfx's bytes equal ONNX Runtime's.
//   * per channel (DequantizeLinear, axis = 1): one scale per column n. As ONNX QuantizeLinear and
//     onnxruntime.quantization's per-channel weights: sym int8: scale = max|v| / 127, q = clamp(
//     rint(v / scale), -127, 127); asym uint8: scale = (max' - min') / 255, zp = clamp(rint(-min' /
//     scale), 0, 255), q = clamp(rint(v / scale) + zp, 0, 255); rint rounds halves to even. A column
//     of zeros gets scale 1.
// The same numbers in standard layouts (relayout()): DequantizeLinear blocked along K over [K, N]
// (ONNX portable profile; the layout onnxruntime's QDQ quantizer writes) and OpenVINO's compressed
// weights [N, K / block, block] (as NNCF writes them). There symmetric values are signed (q - 2^(bits-1),
// no zero point) and asymmetric ones unsigned with zero points of the data's type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hfx::quant {

// `--quantize int8|int4[:block=N|:channel][:sym|asym][:accuracy=0..4]`: int4 defaults to blocks of 32, int8 to blocks
// of 128 (both MatMulNBits); int8:channel is per channel (DequantizeLinear + MatMul, standard ONNX).
struct QuantSpec {
  int bits = 0;        // 0: no quantization; 4 or 8
  int64_t block = 0;   // elements along K sharing a scale; 0 = one per column (int8:channel)
  bool symmetric = true;
  // MatMulNBits accuracy_level (0 = unset): the minimum precision ONNX Runtime may compute in; 4 lets
  // its CPU kernel quantize activations to int8 and use integer dot products (about 2x decode
  // tokens/s on int4, at the cost of an activation rounding hfx's reference executor does not model).
  int accuracy_level = 0;

  bool enabled() const { return bits != 0; }
  // Canonical text: "int4:block=32:sym", "int8:channel:sym", "int8:block=64:asym",
  // "int4:block=32:sym:accuracy=4"; "" if none.
  std::string str() const;
  // Throws BadInput with one line naming the problem ("--quantize int3: ...").
  static QuantSpec parse(const std::string& text);
};

// The precision of an export: the dtype weights are stored in (and Linear layers compute in, where
// ONNX Runtime CPU can), and the weight-only quantization of Linear layers.
struct PrecisionSpec {
  DType dtype = DType::F32;  // F32, F16 or BF16
  QuantSpec quant;
  bool quantize_lm_head = false;  // lm_head stays in `dtype` unless asked
  // Embedding tables quantized too (blockwise, ONNX Runtime's GatherBlockQuantized: --onnx-profile ort);
  // a tied lm_head quantized with them reads the same bytes.
  bool quantize_embeddings = false;

  bool is_default() const { return dtype == DType::F32 && !quant.enabled(); }
  // "f32", "f16", "int4:block=32:sym over f16", ... for messages.
  std::string str() const;
};

// Parses `--dtype`: f32, f16, bf16 (also float32, float16, bfloat16). BadInput otherwise.
DType parse_dtype(const std::string& text);

// Where the quantized values of W[K, N] go.
enum class Layout {
  MatMulNBits,  // blockwise: see above; per channel: data [K, N], scales [N], zero points [N]
  BlockedKN,    // ONNX DequantizeLinear(axis 0, block_size): data [K, N], scales and zero points [k_blocks, N]
  BlockedNK,    // OpenVINO: data [N, k_blocks, block] ([N, K] when one block covers K, and per channel),
                // scales and zero points [N, k_blocks, 1] ([N, 1])
};

struct Quantized {
  std::vector<uint8_t> data;         // blockwise: [N, k_blocks, blob]; per channel: [K, N] int8/uint8
  std::vector<float> scales;         // rounded to the stored scale dtype already
  std::vector<uint8_t> zero_points;  // empty when symmetric
};

// Appends `more`'s columns after `to`'s (blockwise results, whose columns each hold their data, scales
// and zero points together: a weight quantized in chunks of columns, or parts packed side by side).
inline void append_columns(Quantized& to, const Quantized& more) {
  to.data.insert(to.data.end(), more.data.begin(), more.data.end());
  to.scales.insert(to.scales.end(), more.scales.begin(), more.scales.end());
  to.zero_points.insert(to.zero_points.end(), more.zero_points.begin(), more.zero_points.end());
}

inline int64_t k_blocks(int64_t K, int64_t block) { return (K + block - 1) / block; }
inline int64_t blob_bytes(int bits, int64_t block) { return (block * bits + 7) / 8; }
// Bytes of the zero points of one column (blockwise).
inline int64_t zero_point_bytes_per_column(int bits, int64_t K, int64_t block) {
  return (k_blocks(K, block) * bits + 7) / 8;
}
// Block b's zero point in a column's zero-point bytes (blockwise: a byte each for 8 bits, two a byte for
// 4, the even block's in the low nibble); 2^(bits-1), the symmetric one, without zero points.
inline int block_zero_point(const uint8_t* column_zero_points, int64_t b, int bits) {
  if (!column_zero_points) return 1 << (bits - 1);
  const uint8_t z = column_zero_points[b * bits / 8];
  return bits == 8 ? z : (z >> (4 * (b % 2))) & 0xF;
}

// A block's scale, rounded to `scale_dtype`, and zero point from its smallest and largest value (NaNs
// skipped), as ONNX Runtime's MlasQuantizeBlockwise computes them (docs/quantization.md).
struct BlockScale {
  float scale;
  int zero_point;
};
BlockScale block_scale(float mn, float mx, int bits, bool symmetric, DType scale_dtype);

// `w` is W[K, N] row major, or with `w_is_nk` its transpose W^T[N, K] row major (a Linear layer's
// checkpoint layout: each block then reads contiguous memory and no transposed copy is made).
// `scale_dtype` (F32 or F16) is the dtype the scales are stored in. Columns are quantized on up to
// hardware_concurrency() threads; the result does not depend on their number.
Quantized quantize_blockwise(const float* w, int64_t K, int64_t N, int bits, int64_t block, bool symmetric,
                             DType scale_dtype, bool w_is_nk = false);
// The same for W^T[N, K] stored bf16 (uint16_t bits), row major: the bytes quantize_blockwise writes for
// its values widened to f32 (exact), without the f32 copy.
Quantized quantize_blockwise_bf16_nk(const uint16_t* w_nk, int64_t K, int64_t N, int bits, int64_t block, bool symmetric,
                                     DType scale_dtype);
// W[K, N] row major back from the blockwise layout (zero_points nullptr: 2^(bits-1)).
std::vector<float> dequantize_blockwise(const uint8_t* data, const float* scales, const uint8_t* zero_points,
                                        int64_t K, int64_t N, int bits, int64_t block);
// Column n of that W (K values, contiguous in `w`): w[k] = (q - zero point) * scale, read from the
// column's own blocks, so a kernel dequantizes one column at a time.
void dequantize_column(const uint8_t* data, const float* scales, const uint8_t* zero_points, int64_t K, int64_t n,
                       int bits, int64_t block, float* w);

// The blockwise (block > 0, MatMulNBits layout) or per-channel (block 0) result `q` of W[K, N] in layout
// `to`: data packed two per byte for 4 bits (element 2i in the low nibble, row major in the new shape),
// symmetric values made signed (i4 / i8 bytes), zero points (asymmetric) in the data's width. BlockedNK
// with several blocks needs K to be a multiple of the block (BadInput otherwise).
Quantized relayout(Quantized q, int64_t K, int64_t N, int bits, int64_t block, bool symmetric, Layout to);

// `q` in layout `from` to layout `to` (through the blockwise arrangement relayout() starts from): how one
// format's quantized weights are made from the bytes another format of the same export wrote
// (ir/written_weights.h). `to` is not MatMulNBits: the padding of a partial last block, which the
// standard layouts do not store, is not recovered.
Quantized relayout_between(const Quantized& q, int64_t K, int64_t N, int bits, int64_t block, bool symmetric,
                           Layout from, Layout to);

Quantized quantize_per_channel_int8(const float* w, int64_t K, int64_t N, bool symmetric, DType scale_dtype);

// Rounds `v` to `dtype` (F16, BF16: nearest even) and back; F32 as is.
float round_to(DType dtype, float v);

}  // namespace hfx::quant
