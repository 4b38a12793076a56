// Weights as lazy references: a leaf points into a memory-mapped checkpoint file (or holds a small
// constant), and a chain of transforms (transpose, cast, concat, add-scalar, reshape) says how to turn
// it into the tensor a backend writes. Nothing is materialised until a backend asks for one tensor, so peak
// memory stays near the largest tensor, not the model.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/tensor.h"
#include "quant/quantize.h"

namespace hfx::ir {

class WeightRef {
 public:
  // A tensor stored in a checkpoint: `nbytes` bytes at `offset` in `file`.
  static WeightRef source(std::shared_ptr<const MappedFile> file, std::string name, DType dtype,
                          std::vector<int64_t> shape, size_t offset);
  static WeightRef constant(Tensor value);
  static WeightRef concat(std::vector<WeightRef> parts, int64_t axis);

  // A transpose of a transpose composes into one (none when they cancel: GPT-2's Conv1D weights,
  // bound as [out, in] and transposed back by Linear, stay zero-copy).
  WeightRef transposed(std::vector<int64_t> perm) const;
  WeightRef cast(DType to) const;
  WeightRef plus_scalar(double offset) const;  // e.g. Gemma's (1 + w) norm weights
  WeightRef reshaped(std::vector<int64_t> shape) const;  // same elements, same order
  // Weight-only quantization of this [K, N] weight (quant/quantize.h): the tensors a quantized MatMul
  // reads, in order data, scales[, zero points]. block 0 = per channel (DequantizeLinear layout),
  // else blockwise (MatMulNBits layout). The parts share one computation: the first one materialised
  // quantizes the weight and keeps the other parts until they are asked for.
  struct QuantParams {
    int bits = 4;
    int64_t block = 32;
    bool symmetric = true;
    DType scale_dtype = DType::F32;
    // MatMulNBits (com.microsoft; per channel: DequantizeLinear axis 1 over [K, N]), or the blocked
    // DequantizeLinear layouts of the ONNX portable profile and OpenVINO (quant::Layout).
    quant::Layout layout = quant::Layout::MatMulNBits;
  };
  std::vector<WeightRef> quantized(const QuantParams& params) const;

  DType dtype() const;
  const std::vector<int64_t>& shape() const;
  size_t nbytes() const;
  bool is_constant() const;
  // A one-line description of where the tensor comes from: "model.norm.weight^T(1,0) as f32".
  std::string describe() const;
  // Names of the checkpoint tensors this weight reads.
  std::vector<std::string> source_names() const;

  // The bytes as stored, when no transform applies (zero copy from the mapped file).
  std::optional<std::span<const uint8_t>> raw_bytes() const;
  // Where a checkpoint tensor lies unchanged in its file: a source weight (reshaped or not); nullopt
  // for a constant or any transform of the bytes.
  struct StoredAt {
    std::shared_ptr<const MappedFile> file;
    size_t offset = 0;
  };
  std::optional<StoredAt> stored_at() const;
  // The parts of a concatenation on `axis` (the packed q|k|v and gate|up on axis 0); empty for any
  // other weight.
  std::vector<WeightRef> concat_parts(int64_t axis) const;
  // Computes the tensor (reads the mapped source pages, applies transforms).
  Tensor materialize() const;
  // Memory cost of writing this weight, for preflight estimates (kept beside materialize(), which it
  // mirrors): the mapped source bytes it reads (resident until release_source_pages()), and the most
  // bytes of tensors materialize() holds at once (0 when raw_bytes() serves the weight).
  size_t source_bytes() const;
  size_t materialize_peak_bytes() const;
  // Drops the source pages this weight read from our resident set (a writer calls it once the
  // tensor is written, so streaming a model does not keep the whole checkpoint resident).
  void release_source_pages() const;

  // Streaming by blocks of rows (rows = slices along the first axis), so a writer can compute one
  // block while the previous one is written, without a tensor-sized buffer. streamable(): write_rows()
  // reads the mapped source directly for this weight (stored bytes, a cast of them, a 2-D transpose
  // of them with or without a bf16/f16 -> f32 cast, a concatenation on axis 0 or 1 of such weights);
  // other weights go through materialize(). Both give the same bytes.
  bool streamable() const;
  int64_t rows() const;  // shape[0]; 1 for a scalar
  size_t row_bytes() const;
  // Rows [r0, r1) into dst, row i at dst + (i - r0) * dst_stride. streamable() weights only.
  void write_rows(int64_t r0, int64_t r1, uint8_t* dst, size_t dst_stride) const;

  // Where other weights sit inside this one (WeightBlock); empty unless this is a concatenation (or the
  // MatMulNBits quantization of one, whose parts stack the concatenated columns' rows).
  std::vector<struct WeightBlock> blocks() const;
  // A part of a quantized weight in a standard layout (portable DequantizeLinear, OpenVINO) holds the
  // same numbers as the weight quantized with the same parameters in layout `from`: those parts
  // (data, scales[, zero points]); empty when this is not such a part. relaid_from() computes this part
  // from their bytes, so a second format need not read and quantize the checkpoint tensor again.
  std::vector<WeightRef> quantized_in(quant::Layout from) const;
  // A 2-D weight's transpose with the transpose under its casts ("q^T(1,0) as f16" for "q as f16"): the
  // name ONNX gives a [K, N] weight that OpenVINO stores [N, K]; nullopt unless 2-D.
  std::optional<WeightRef> transposed_under_casts() const;
  // A 2-D transpose under its casts (a folded Linear weight: the checkpoint's [N, K] read as [K, N]),
  // whose transposed_under_casts() is then the stored layout.
  bool is_transpose_under_casts() const;
  Tensor relaid_from(quant::Layout from, const std::vector<std::span<const uint8_t>>& parts) const;
  // A 2-D weight whose values are one stored tensor's, read in place (StoredMatrix); nullopt for any
  // other weight (a rounding cast, a concatenation, a quantized part, a constant).
  std::optional<struct StoredMatrix> stored_matrix() const;

  struct Node;
  const Node* node() const { return node_.get(); }  // for the transforms in weight.cc

 private:
  std::vector<struct WeightBlock> quantized_blocks() const;
  // This weight as `to` with no conversion, when it is a lossless widening (a bf16 or f16 weight
  // cast to f32, transposed or reshaped since) of a `to` weight; nullopt otherwise.
  std::optional<WeightRef> without_widening(DType to) const;
  explicit WeightRef(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  std::shared_ptr<const Node> node_;
};

// A weight inside another: for a concatenation, seen through 2-D transposes and element-wise
// transforms (casts, plus-scalar), each part with those transforms applied to it, and the bytes it
// takes in the whole's row-major layout: `runs` runs of `run_bytes`, `stride` apart, from `offset`
// (one run when the parts are stacked on the first axis; the packed q|k|v's Transpose(Concat(q, k, v))
// gives each part's transpose as a block of columns). So a writer that finds q^T in an earlier
// format's packed tensor reads it from there.
// A 2-D weight that is a source tensor (f32, bf16 or f16) as it lies in the mapped file, maybe
// transposed, with no cast above it but widenings to f32: a kernel can read it block by block, widening
// as it goes, where materialize() would make an f32 copy of the whole (and a transposed one for
// Linear weights). The reference executor's MatMul, Linear and Gather read such weights this way, so a
// model-sized check holds no f32 copy of the model.
struct StoredMatrix {
  const uint8_t* data = nullptr;  // row-major, `rows` x `cols` elements of `dtype`
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  bool transposed = false;  // the weight is the stored matrix's transpose: [cols, rows]
  // The mapped file `data` lies in (nullptr for bytes in memory): a kernel streaming a weight larger
  // than a few blocks releases the pages it has read as it goes (MappedFile::release).
  const MappedFile* file = nullptr;
  // Non-empty: the matrix is these stored matrices' rows stacked, in order (`data` is nullptr): the
  // packed q|k|v of a mirrored ONNX export read back (onnx/checkpoint_mirror.h), a Concat of stored
  // tensors. Each part is read in place as a matrix of its own.
  std::vector<StoredMatrix> stack;
};

// A checkpoint's float matrix (not a constant the graph computes with): what the precision pass and the
// ort profile's FusedMatMul treat as a Linear layer's weight; false for nullptr.
bool is_checkpoint_matrix(const WeightRef* w);

struct WeightBlock {
  WeightRef part;
  size_t offset = 0, run_bytes = 0, stride = 0;
  int64_t runs = 1;
};

}  // namespace hfx::ir
