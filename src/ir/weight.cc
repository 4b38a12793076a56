#include "ir/weight.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "ir/weight_kernels.h"
#include "ir/quantized_memo.h"
#include "ir/weight_node.h"
#include "quant/quantize.h"

namespace hfx::ir {

bool needs_quantizing(const WeightRef::Node& n, const QuantState& q) { return !q.result || (q.taken >> n.part & 1); }

Tensor take_quantized_part(const WeightRef::Node& n, QuantState& q) {
  HFX_CHECK(!needs_quantizing(n, q), "quantized part {} handed out twice from one result", n.part);
  Tensor t;
  if (n.part == 1) {
    t = Tensor(n.dtype, n.shape);
    convert_elements(DType::F32, q.result->scales.data(), n.dtype, t.data(), q.result->scales.size());
  } else {  // moved out: this part is not handed out again from this result
    t = Tensor(n.dtype, n.shape, std::move(n.part == 0 ? q.result->data : q.result->zero_points));
  }
  q.taken |= 1 << n.part;
  if (q.taken == (q.params.symmetric ? 3 : 7)) q.result.reset();  // every part handed out
  return t;
}

WeightRef WeightRef::source(std::shared_ptr<const MappedFile> file, std::string name, DType dtype,
                            std::vector<int64_t> shape, size_t offset) {
  auto n = std::make_shared<Node>();
  n->kind = Node::Source;
  n->dtype = dtype;
  n->shape = std::move(shape);
  n->file = std::move(file);
  n->name = std::move(name);
  n->offset = offset;
  HFX_CHECK(n->offset + dtype_nbytes(dtype, size_t(numel_of(n->shape))) <= n->file->size(),
            "weight {} out of file bounds", n->name);
  return WeightRef(std::move(n));
}

WeightRef WeightRef::constant(Tensor value) {
  auto n = std::make_shared<Node>();
  n->kind = Node::Constant;
  n->dtype = value.dtype();
  n->shape = value.shape();
  n->value = std::move(value);
  return WeightRef(std::move(n));
}

WeightRef WeightRef::concat(std::vector<WeightRef> parts, int64_t axis) {
  HFX_CHECK(!parts.empty(), "concat of no weights");
  auto n = std::make_shared<Node>();
  n->kind = Node::Concat;
  n->dtype = parts[0].dtype();
  n->shape = parts[0].shape();
  const auto rank = int64_t(n->shape.size());
  if (axis < 0) axis += rank;
  n->axis = axis;
  n->shape[size_t(axis)] = 0;
  for (const auto& p : parts) {
    HFX_CHECK(p.dtype() == n->dtype && p.shape().size() == size_t(rank), "concat of mismatched weights {}",
              p.describe());
    n->shape[size_t(axis)] += p.shape()[size_t(axis)];
  }
  n->children = std::move(parts);
  return WeightRef(std::move(n));
}

WeightRef WeightRef::transposed(std::vector<int64_t> perm) const {
  HFX_CHECK(perm.size() == shape().size(), "transpose perm rank");
  if (node_->kind == Node::Transpose) {
    // out[i] = this[perm[i]] = child[inner[perm[i]]]
    std::vector<int64_t> composed;
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) {
      composed.push_back(node_->perm[size_t(perm[i])]);
      identity = identity && composed.back() == int64_t(i);
    }
    return identity ? node_->children[0] : node_->children[0].transposed(std::move(composed));
  }
  auto n = std::make_shared<Node>();
  n->kind = Node::Transpose;
  n->dtype = dtype();
  HFX_CHECK(perm.size() == shape().size(), "transpose perm rank");
  for (auto p : perm) n->shape.push_back(shape()[size_t(p)]);
  n->perm = std::move(perm);
  n->children = {*this};
  return WeightRef(std::move(n));
}

std::optional<WeightRef> WeightRef::without_widening(DType to) const {
  if (to != DType::BF16 && to != DType::F16) return std::nullopt;
  const Node& n = *node_;
  switch (n.kind) {
    case Node::Cast:
      if (n.dtype == DType::F32 && n.children[0].dtype() == to) return n.children[0];
      return std::nullopt;
    case Node::Transpose:
      if (auto inner = n.children[0].without_widening(to)) return inner->transposed(n.perm);
      return std::nullopt;
    case Node::Reshape:
      if (auto inner = n.children[0].without_widening(to)) return inner->reshaped(n.shape);
      return std::nullopt;
    case Node::Concat: {  // the packed q|k|v of the ort profile
      std::vector<WeightRef> parts;
      for (const auto& c : n.children) {
        auto part = c.without_widening(to);
        if (!part) return std::nullopt;
        parts.push_back(std::move(*part));
      }
      return concat(std::move(parts), n.axis);
    }
    default: return std::nullopt;
  }
}

WeightRef WeightRef::cast(DType to) const {
  if (to == dtype()) return *this;
  // A bf16 export of a bf16 checkpoint: the graph was built in f32 over widened weights, and casting
  // them back must not widen and narrow every element; the stored bytes are the values.
  if (auto same = without_widening(to)) return *same;
  auto n = std::make_shared<Node>();
  n->kind = Node::Cast;
  n->dtype = to;
  n->shape = shape();
  n->children = {*this};
  return WeightRef(std::move(n));
}

WeightRef WeightRef::plus_scalar(double offset) const {
  auto n = std::make_shared<Node>();
  n->kind = Node::PlusScalar;
  n->dtype = dtype();
  n->shape = shape();
  n->scalar = offset;
  n->children = {*this};
  return WeightRef(std::move(n));
}

WeightRef WeightRef::reshaped(std::vector<int64_t> shape) const {
  HFX_CHECK(numel_of(shape) == numel_of(this->shape()), "reshape of {} to [{}] changes the element count", describe(),
            fmt::join(shape, ", "));
  auto n = std::make_shared<Node>();
  n->kind = Node::Reshape;
  n->dtype = dtype();
  n->shape = std::move(shape);
  n->children = {*this};
  return WeightRef(std::move(n));
}

std::vector<WeightRef> WeightRef::quantized(const QuantParams& p) const {
  HFX_CHECK(shape().size() == 2 && is_float(dtype()), "quantizing {}: not a 2-D float weight", describe());
  HFX_CHECK((p.bits == 4 && p.block > 0) || p.bits == 8, "quantizing {}: {} bits, block {}", describe(), p.bits, p.block);
  auto state = std::make_shared<QuantState>();
  state->params = p;
  state->K = shape()[0];
  state->N = shape()[1];
  const int64_t K = state->K, N = state->N;
  std::vector<WeightRef> parts;
  auto add = [&](int part, DType dtype, std::vector<int64_t> shape) {
    auto n = std::make_shared<Node>();
    n->kind = Node::Quantized;
    n->dtype = dtype;
    n->shape = std::move(shape);
    n->quant = state;
    n->part = part;
    n->children = {*this};
    parts.push_back(WeightRef(std::move(n)));
  };
  const int64_t kb = p.block ? quant::k_blocks(K, p.block) : 1;
  if (p.layout != quant::Layout::MatMulNBits && (p.block > 0 || p.layout == quant::Layout::BlockedNK)) {
    // Blocked DequantizeLinear (quant::Layout): signed values when symmetric, no zero point.
    const DType data = p.bits == 4 ? (p.symmetric ? DType::I4 : DType::U4) : (p.symmetric ? DType::I8 : DType::U8);
    std::vector<int64_t> dshape = {K, N}, sshape = {kb, N};
    if (p.layout == quant::Layout::BlockedNK) {
      dshape = kb > 1 ? std::vector<int64_t>{N, kb, p.block} : std::vector<int64_t>{N, K};
      sshape = kb > 1 ? std::vector<int64_t>{N, kb, 1} : std::vector<int64_t>{N, 1};
    }
    add(0, data, dshape);
    add(1, p.scale_dtype, sshape);
    if (!p.symmetric) add(2, p.bits == 4 ? DType::U4 : DType::U8, sshape);
  } else if (p.block == 0) {  // per channel, DequantizeLinear(axis = 1)
    add(0, p.symmetric ? DType::I8 : DType::U8, {K, N});
    add(1, p.scale_dtype, {N});
    if (!p.symmetric) add(2, DType::U8, {N});
  } else {  // MatMulNBits
    add(0, DType::U8, {N, kb, quant::blob_bytes(p.bits, p.block)});
    add(1, p.scale_dtype, {N * kb});
    if (!p.symmetric) add(2, DType::U8, {N * quant::zero_point_bytes_per_column(p.bits, K, p.block)});
  }
  return parts;
}

DType WeightRef::dtype() const { return node_->dtype; }
const std::vector<int64_t>& WeightRef::shape() const { return node_->shape; }
size_t WeightRef::nbytes() const { return dtype_nbytes(node_->dtype, size_t(numel_of(node_->shape))); }
bool WeightRef::is_constant() const { return node_->kind == Node::Constant; }

std::string WeightRef::describe() const {
  const Node& n = *node_;
  switch (n.kind) {
    case Node::Source: return n.name;
    case Node::Constant: return "constant";
    case Node::Transpose: return fmt::format("{}^T({})", n.children[0].describe(), fmt::join(n.perm, ","));
    case Node::Cast: return fmt::format("{} as {}", n.children[0].describe(), dtype_name(n.dtype));
    case Node::PlusScalar: return fmt::format("({} + {})", n.children[0].describe(), n.scalar);
    case Node::Reshape: return fmt::format("{} as [{}]", n.children[0].describe(), fmt::join(n.shape, ","));
    case Node::Quantized: {
      const auto& p = n.quant->params;
      static const char* parts[] = {"data", "scales", "zero_points"};
      // The layout is part of the name: a square weight's [K, N] and [N, K] parts have equal shapes, and
      // WrittenWeights matches weights by name, dtype and shape.
      static const char* layouts[] = {"matmulnbits", "kn", "nk"};
      return fmt::format("q{}({}; block={}, {}, {}).{}", p.bits, n.children[0].describe(), p.block,
                         p.symmetric ? "sym" : "asym", layouts[int(p.layout)], parts[n.part]);
    }
    case Node::Concat: {
      std::vector<std::string> parts;
      for (const auto& c : n.children) parts.push_back(c.describe());
      return fmt::format("concat({}; axis={})", fmt::join(parts, ", "), n.axis);
    }
  }
  return "?";
}

std::vector<std::string> WeightRef::source_names() const {
  if (node_->kind == Node::Source) return {node_->name};
  std::vector<std::string> out;
  for (const auto& c : node_->children)
    for (auto& s : c.source_names()) out.push_back(std::move(s));
  return out;
}

void WeightRef::release_source_pages() const {
  if (node_->kind == Node::Source) node_->file->release(node_->offset, nbytes());
  for (const auto& c : node_->children) c.release_source_pages();
}

std::optional<std::span<const uint8_t>> WeightRef::raw_bytes() const {
  if (node_->kind == Node::Source) return std::span<const uint8_t>(node_->file->data() + node_->offset, nbytes());
  if (node_->kind == Node::Constant) return std::span<const uint8_t>(node_->value.data(), node_->value.nbytes());
  if (node_->kind == Node::Reshape) return node_->children[0].raw_bytes();  // same bytes, new shape
  return std::nullopt;
}

std::optional<WeightRef::StoredAt> WeightRef::stored_at() const {
  if (node_->kind == Node::Source) return StoredAt{node_->file, node_->offset};
  if (node_->kind == Node::Reshape) return node_->children[0].stored_at();  // same bytes, new shape
  return std::nullopt;
}

std::vector<WeightRef> WeightRef::concat_parts(int64_t axis) const {
  if (node_->kind != Node::Concat || node_->axis != axis) return {};
  return node_->children;
}

namespace {

// Out of line: inlined into materialize(), GCC 12 misreads its index vector's delete (-Wfree-nonheap-object).
[[gnu::noinline]] Tensor transpose_tensor(const Tensor& in, const std::vector<int64_t>& perm) {
  const auto& ish = in.shape();
  const size_t rank = ish.size();
  std::vector<int64_t> osh(rank);
  for (size_t i = 0; i < rank; ++i) osh[i] = ish[size_t(perm[i])];
  Tensor out(in.dtype(), osh);
  const size_t es = dtype_size(in.dtype());
  std::vector<int64_t> istride(rank, 1);
  for (size_t i = rank; i-- > 1;) istride[i - 1] = istride[i] * ish[i];
  // Fast path for the 2-D transpose every Linear weight needs, blocked for cache locality.
  if (rank == 2 && perm[0] == 1 && es == 4) {
    const int64_t rows = ish[0], cols = ish[1];
    const int64_t B = 64;
    const auto* src = reinterpret_cast<const uint32_t*>(in.data());
    auto* dst = reinterpret_cast<uint32_t*>(out.data());
    for (int64_t r0 = 0; r0 < rows; r0 += B)
      for (int64_t c0 = 0; c0 < cols; c0 += B) {
        const int64_t r1 = std::min(rows, r0 + B), c1 = std::min(cols, c0 + B);
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
      }
    return out;
  }
  if (rank == 2 && perm[0] == 1) {
    const int64_t rows = ish[0], cols = ish[1];
    const int64_t B = 64;
    for (int64_t r0 = 0; r0 < rows; r0 += B)
      for (int64_t c0 = 0; c0 < cols; c0 += B)
        for (int64_t r = r0; r < std::min(rows, r0 + B); ++r)
          for (int64_t c = c0; c < std::min(cols, c0 + B); ++c)
            std::memcpy(out.data() + size_t(c * rows + r) * es, in.data() + size_t(r * cols + c) * es, es);
    return out;
  }
  const int64_t n = in.numel();
  std::vector<int64_t> idx(rank, 0);
  for (int64_t o = 0; o < n; ++o) {
    int64_t src = 0;
    for (size_t i = 0; i < rank; ++i) src += idx[i] * istride[size_t(perm[i])];
    std::memcpy(out.data() + size_t(o) * es, in.data() + size_t(src) * es, es);
    for (size_t i = rank; i-- > 0;) {
      if (++idx[i] < osh[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

Tensor concat_tensors(const std::vector<Tensor>& parts, int64_t axis, DType dtype, std::vector<int64_t> shape) {
  Tensor out(dtype, shape);
  const size_t es = dtype_size(dtype);
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[size_t(i)];
  size_t offset = 0;
  const size_t out_row = size_t(out.numel() / outer) * es;
  for (const auto& p : parts) {
    const size_t row = size_t(p.numel() / outer) * es;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out.data() + size_t(o) * out_row + offset, p.data() + size_t(o) * row, row);
    offset += row;
  }
  return out;
}

}  // namespace

// --- streaming by rows ------------------------------------------------------------------------

namespace {

bool packed(DType t) { return dtype_nbytes(t, 2) < 2 * dtype_size(t) || dtype_size(t) == 0; }  // 4-bit types

}  // namespace

int64_t WeightRef::rows() const { return shape().empty() ? 1 : shape()[0]; }
size_t WeightRef::row_bytes() const { return rows() == 0 ? 0 : nbytes() / size_t(rows()); }

bool WeightRef::streamable() const {
  const Node& n = *node_;
  if (packed(n.dtype)) return false;
  if (raw_bytes()) return true;
  switch (n.kind) {
    case Node::Cast: {  // from the mapped bytes, or from the rows a streamable child writes (an f16 export's
                        // Linear weight: the f32 transpose of a bf16 checkpoint tensor, narrowed)
      const WeightRef& c = n.children[0];
      return (c.raw_bytes() || c.streamable()) && !packed(c.dtype()) && is_float(c.dtype()) && is_float(n.dtype);
    }
    case Node::Transpose: {
      if (n.shape.size() != 2 || n.perm[0] != 1) return false;
      const Node& c = *n.children[0].node_;
      if (n.children[0].raw_bytes()) return true;  // same dtype
      if (c.kind == Node::Concat && c.axis == 0)  // packed q|k|v: the parts' transposes side by side
        return std::all_of(c.children.begin(), c.children.end(),
                           [](const WeightRef& part) { return part.transposed({1, 0}).streamable(); });
      return c.kind == Node::Cast && c.dtype == DType::F32 && c.children[0].raw_bytes() &&
             (c.children[0].dtype() == DType::BF16 || c.children[0].dtype() == DType::F16);
    }
    case Node::Concat:
      if (n.axis > 1 || n.shape.empty()) return false;
      return std::all_of(n.children.begin(), n.children.end(), [](const WeightRef& c) { return c.streamable(); });
    default: return false;
  }
}

void WeightRef::write_rows(int64_t r0, int64_t r1, uint8_t* dst, size_t dst_stride) const {
  const Node& n = *node_;
  const size_t rb = row_bytes();
  HFX_CHECK(0 <= r0 && r0 <= r1 && r1 <= rows() && dst_stride >= rb, "write_rows [{}, {}) of {}", r0, r1, describe());
  if (auto raw = raw_bytes()) {
    if (dst_stride == rb) return void(std::memcpy(dst, raw->data() + size_t(r0) * rb, size_t(r1 - r0) * rb));
    for (int64_t r = r0; r < r1; ++r) std::memcpy(dst + size_t(r - r0) * dst_stride, raw->data() + size_t(r) * rb, rb);
    return;
  }
  switch (n.kind) {
    case Node::Cast: {
      const WeightRef& c = n.children[0];
      const size_t per_row = size_t(numel_of(n.shape)) / size_t(std::max<int64_t>(rows(), 1));
      const size_t src_rb = per_row * dtype_size(c.dtype());
      if (!c.raw_bytes()) {  // the child's rows of this block, then converted: one block-sized buffer
        std::vector<uint8_t> block(size_t(r1 - r0) * src_rb);
        c.write_rows(r0, r1, block.data(), src_rb);
        for (int64_t r = r0; r < r1; ++r)
          convert_elements(c.dtype(), block.data() + size_t(r - r0) * src_rb, n.dtype, dst + size_t(r - r0) * dst_stride,
                           per_row);
        return;
      }
      const auto raw = *c.raw_bytes();
      if (dst_stride == rb)
        return convert_elements(c.dtype(), raw.data() + size_t(r0) * src_rb, n.dtype, dst, size_t(r1 - r0) * per_row);
      for (int64_t r = r0; r < r1; ++r)
        convert_elements(c.dtype(), raw.data() + size_t(r) * src_rb, n.dtype, dst + size_t(r - r0) * dst_stride, per_row);
      return;
    }
    case Node::Transpose: {  // output rows = source columns
      const WeightRef& c = n.children[0];
      if (c.node_->kind == Node::Concat) {  // (A; B)^T = (A^T, B^T): each part's columns, side by side
        size_t offset = 0;
        for (const auto& part : c.node_->children) {
          const WeightRef t = part.transposed({1, 0});
          t.write_rows(r0, r1, dst + offset, dst_stride);
          offset += t.row_bytes();
        }
        return;
      }
      const WeightRef& leaf = c.raw_bytes() ? c : c.node_->children[0];
      transpose_block(leaf.dtype(), leaf.raw_bytes()->data(), c.shape()[0], c.shape()[1], n.dtype, r0, r1, dst, dst_stride);
      return;
    }
    case Node::Concat: {
      if (n.axis == 1) {  // each output row is the parts' rows side by side
        size_t offset = 0;
        for (const auto& c : n.children) {
          c.write_rows(r0, r1, dst + offset, dst_stride);
          offset += c.row_bytes();
        }
        return;
      }
      int64_t base = 0;  // axis 0: the parts' rows one after another
      for (const auto& c : n.children) {
        const int64_t lo = std::max(r0, base), hi = std::min(r1, base + c.rows());
        if (lo < hi) c.write_rows(lo - base, hi - base, dst + size_t(lo - r0) * dst_stride, dst_stride);
        base += c.rows();
      }
      return;
    }
    default: HFX_CHECK(false, "write_rows of {}: not streamable", describe());
  }
}

size_t WeightRef::source_bytes() const {
  if (node_->kind == Node::Source) return nbytes();
  // The parts of one quantized weight share one quantization: the source is read once, counted on
  // the data part.
  if (node_->kind == Node::Quantized && node_->part != 0) return 0;
  size_t total = 0;
  for (const auto& c : node_->children) total += c.source_bytes();
  return total;
}

namespace {
// Rows of f32 a weight read through its transpose is quantized in (quantize_nk_in_chunks).
constexpr size_t kQuantChunkBytes = size_t(16) << 20;
bool quantized_in_chunks(const WeightRef::Node& n);
}  // namespace

size_t WeightRef::materialize_peak_bytes() const {
  if (raw_bytes()) return 0;
  if (streamable()) return nbytes();  // write_rows() into the one output tensor
  const Node& n = *node_;
  const size_t out = nbytes();
  // A child materialised, then transformed into a new tensor of `out` bytes while it is alive.
  auto via_child = [&](const WeightRef& c) {
    const size_t child = c.raw_bytes() ? c.nbytes() : std::max(c.materialize_peak_bytes(), c.nbytes());
    return std::max(c.materialize_peak_bytes(), child + out);
  };
  switch (n.kind) {
    case Node::Source:
    case Node::Constant: return out;  // one copy
    case Node::Transpose: {
      const Node& c = *n.children[0].node_;
      if (c.kind == Node::Cast && c.dtype == DType::F32 && n.shape.size() == 2 && n.perm[0] == 1 &&
          c.children[0].raw_bytes() && (c.children[0].dtype() == DType::BF16 || c.children[0].dtype() == DType::F16))
        return out;  // the fused cast + transpose
      return via_child(n.children[0]);
    }
    case Node::Cast:
      if (n.children[0].raw_bytes()) return out;  // converted straight from the mapped bytes
      return via_child(n.children[0]);
    case Node::PlusScalar: return via_child(n.children[0]) + out;  // an f32 working copy too
    case Node::Reshape: return via_child(n.children[0]);
    case Node::Quantized: {  // the child as f32 (or one chunk of it), and every part of the result
      const WeightRef& c = n.children[0];
      const size_t child_f32 = size_t(numel_of(c.shape())) * 4;
      if (quantized_in_chunks(n)) return std::min(child_f32, kQuantChunkBytes) * 2 + child_f32 / 2;
      return std::max(c.materialize_peak_bytes(), c.nbytes() + child_f32) + child_f32 / 2;
    }
    case Node::Concat: {
      size_t held = 0, peak = 0;  // parts are materialised one after another and kept
      for (const auto& c : n.children) {
        peak = std::max(peak, held + std::max(c.materialize_peak_bytes(), c.nbytes()));
        held += c.nbytes();
      }
      return std::max(peak, held + out);
    }
  }
  return 2 * out;
}

namespace {

// A weight that is casts over Transpose(X, [1, 0]), seen as X with the casts to apply to its values:
// the transpose of the weight's values, read without making the transposed copy (untransposed()
// gives nullopt for any other chain).
struct Untransposed {
  WeightRef nk;              // X: the [N, K] weight under the Transpose
  std::vector<DType> casts;  // applied to X's values, outermost last
};

std::optional<Untransposed> untransposed(const WeightRef& w) {
  std::vector<DType> casts;
  const WeightRef::Node* n = w.node();
  while (n->kind == WeightRef::Node::Cast) {
    casts.push_back(n->dtype);
    n = n->children[0].node();
  }
  if (n->kind != WeightRef::Node::Transpose || n->perm != std::vector<int64_t>{1, 0}) return std::nullopt;
  std::reverse(casts.begin(), casts.end());
  return Untransposed{n->children[0], std::move(casts)};
}

Tensor with_casts_f32(Tensor t, const std::vector<DType>& casts) {
  for (DType c : casts)
    if (t.dtype() != c) t = t.cast(c);
  return t.dtype() == DType::F32 ? std::move(t) : t.cast(DType::F32);
}

// Blockwise quantization of W[K, N] = casts(X^T) for a streamable X [N, K], in chunks of X's rows (W's
// columns): MatMulNBits' layout keeps each column's data, scales and zero points contiguous, so the
// chunks' results concatenate. A vocabulary-sized lm_head or embedding table is never held in f32 whole
// (16 MiB at a time instead of 600 MB for Qwen3's), with the same bytes.
bool quantized_in_chunks(const WeightRef::Node& n) {
  if (n.quant->params.block == 0) return false;
  auto u = untransposed(n.children[0]);
  return u && u->nk.streamable();
}

// X as the bf16 tensor it widens, when its f32 values are exactly bf16 values widened: a bf16 tensor, a
// cast of one to f32 (a Linear weight cast before its transpose), or a concatenation on axis 0 of such
// (packed q|k|v). nullopt for anything else, or when the bf16 rows cannot be streamed.
std::optional<WeightRef> bf16_before_widening(const WeightRef& x) {
  const WeightRef::Node& n = *x.node();
  std::optional<WeightRef> bf16;
  if (x.dtype() == DType::BF16) {
    bf16 = x;
  } else if (n.kind == WeightRef::Node::Cast && n.dtype == DType::F32) {
    if (n.children[0].dtype() == DType::BF16) bf16 = n.children[0];
  } else if (n.kind == WeightRef::Node::Concat && n.axis == 0 && x.dtype() == DType::F32) {
    std::vector<WeightRef> parts;
    for (const auto& c : n.children) {
      auto part = bf16_before_widening(c);
      if (!part) return std::nullopt;
      parts.push_back(std::move(*part));
    }
    bf16 = WeightRef::concat(std::move(parts), 0);
  }
  if (bf16 && !bf16->streamable()) return std::nullopt;
  return bf16;
}

// The stored tensors `nk` stacks (a checkpoint's tensor, or an axis-0 concatenation of them: packed
// q|k|v), in row order, as the quantization memo names them; nullopt for anything computed.
std::optional<std::vector<QuantizedMemo::Stored>> stored_tensors(const WeightRef& nk) {
  const WeightRef::Node& n = *nk.node();
  if (n.kind == WeightRef::Node::Source && n.shape.size() == 2) {
    if (n.file->identity() == MappedFile::Identity{}) return std::nullopt;  // unknown: no key
    return std::vector<QuantizedMemo::Stored>{{n.file->identity(), n.offset, n.dtype, n.shape[0], n.shape[1]}};
  }
  if (n.kind != WeightRef::Node::Concat || n.axis != 0) return std::nullopt;
  std::vector<QuantizedMemo::Stored> parts;
  for (const auto& c : n.children) {
    auto more = stored_tensors(c);
    if (!more) return std::nullopt;
    parts.insert(parts.end(), more->begin(), more->end());
  }
  return parts;
}

quant::Quantized quantize_nk_chunks(const WeightRef& nk, bool bf16, const std::vector<DType>& casts, int64_t K,
                                    int64_t N, const WeightRef::QuantParams& p) {
  const int64_t chunk = std::max<int64_t>(1, int64_t(kQuantChunkBytes) / std::max<int64_t>(1, K * 4));
  // bf16 rows stored as they are (a checkpoint's tensor) are read where they lie in the mapped file.
  const auto stored = bf16 ? nk.raw_bytes() : std::nullopt;
  quant::Quantized all;
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t n1 = std::min(N, n0 + chunk);
    Tensor rows;  // the chunk's rows, unless read in place
    if (!stored) {
      rows = Tensor(nk.dtype(), {n1 - n0, K});
      nk.write_rows(n0, n1, static_cast<uint8_t*>(rows.data()), nk.row_bytes());
    }
    auto part = bf16 ? quant::quantize_blockwise_bf16_nk(
                           stored ? reinterpret_cast<const uint16_t*>(stored->data() + size_t(n0) * nk.row_bytes())
                                  : rows.as<uint16_t>(),
                           K, n1 - n0, p.bits, p.block, p.symmetric, p.scale_dtype)
                     : quant::quantize_blockwise(with_casts_f32(std::move(rows), casts).as<float>(), K, n1 - n0, p.bits,
                                                 p.block, p.symmetric, p.scale_dtype, true);
    if (n0 == 0 && n1 == N) return part;  // one chunk: the whole weight
    quant::append_columns(all, part);
  }
  return all;
}

quant::Quantized quantize_nk_in_chunks(const Untransposed& u, int64_t K, int64_t N, const WeightRef::QuantParams& p) {
  // A bf16 checkpoint's weight only widened (the usual chain, the widening before or after the
  // transpose) is quantized as stored: the same bytes as from its f32 copy, which is not made.
  const bool widened_only = std::all_of(u.casts.begin(), u.casts.end(), [](DType c) { return c == DType::F32; });
  const std::optional<WeightRef> bf16 = widened_only ? bf16_before_widening(u.nk) : std::nullopt;
  const WeightRef& nk = bf16 ? *bf16 : u.nk;
  // Stored values only widened are what the memo keeps: the export's writers and its check's reference
  // quantize the same tensors under the same scheme (ir/quantized_memo.h).
  QuantizedMemo* memo = widened_only ? QuantizedMemo::active() : nullptr;
  const auto parts = memo ? stored_tensors(nk) : std::nullopt;
  const QuantizedMemo::Scheme scheme{p.bits, p.block, p.symmetric, p.scale_dtype};
  if (parts)
    if (auto kept = memo->take(*parts, scheme)) return std::move(*kept);
  quant::Quantized q = quantize_nk_chunks(nk, bool(bf16), u.casts, K, N, p);
  if (parts) memo->keep(*parts, scheme, q);
  return q;
}

}  // namespace

Tensor WeightRef::materialize() const {
  const Node& n = *node_;
  if (n.kind != Node::Source && n.kind != Node::Constant && streamable()) {
    Tensor t(n.dtype, n.shape);  // the row kernels a streaming writer uses, so both give the same bytes
    write_rows(0, rows(), t.data(), row_bytes());
    return t;
  }
  switch (n.kind) {
    case Node::Source: {
      Tensor t(n.dtype, n.shape);
      std::memcpy(t.data(), n.file->data() + n.offset, t.nbytes());
      return t;
    }
    case Node::Constant: return n.value;
    case Node::Transpose: {
      // Cast + 2-D transpose straight from the mapped bytes: one output-sized buffer, no intermediate.
      const Node& c = *n.children[0].node_;
      if (c.kind == Node::Cast && c.dtype == DType::F32 && n.shape.size() == 2 && n.perm[0] == 1)
        if (auto raw = c.children[0].raw_bytes(); raw && (c.children[0].dtype() == DType::BF16 || c.children[0].dtype() == DType::F16)) {
          const bool bf16 = c.children[0].dtype() == DType::BF16;
          const int64_t rows = c.shape[0], cols = c.shape[1];
          Tensor out(DType::F32, n.shape);
          const auto* src = reinterpret_cast<const uint16_t*>(raw->data());
          float* dst = out.as<float>();
          constexpr int64_t B = 64;
          for (int64_t r0 = 0; r0 < rows; r0 += B)
            for (int64_t c0 = 0; c0 < cols; c0 += B)
              for (int64_t r = r0; r < std::min(rows, r0 + B); ++r)
                for (int64_t k = c0; k < std::min(cols, c0 + B); ++k) {
                  uint16_t h;
                  std::memcpy(&h, src + r * cols + k, 2);
                  dst[k * rows + r] = bf16 ? bf16_to_f32(h) : f16_to_f32(h);
                }
          return out;
        }
      return transpose_tensor(n.children[0].materialize(), n.perm);
    }
    case Node::Cast: {
      // Cast straight from the mapped bytes when possible: saves one full-size copy.
      if (auto raw = n.children[0].raw_bytes()) {
        Tensor t(n.dtype, n.shape);
        convert_elements(n.children[0].dtype(), raw->data(), n.dtype, t.data(), size_t(t.numel()));
        return t;
      }
      return n.children[0].materialize().cast(n.dtype);
    }
    case Node::PlusScalar: {
      Tensor t = n.children[0].materialize().cast(DType::F32);
      for (auto& v : std::span<float>(t.as<float>(), size_t(t.numel()))) v = float(double(v) + n.scalar);
      return t.cast(n.dtype);
    }
    case Node::Concat: {
      std::vector<Tensor> parts;
      for (const auto& c : n.children) parts.push_back(c.materialize());
      return concat_tensors(parts, n.axis, n.dtype, n.shape);
    }
    case Node::Quantized: {
      QuantState& q = *n.quant;
      std::lock_guard<std::mutex> lock(q.mutex);
      if (needs_quantizing(n, q)) {
        const auto& p = q.params;
        // Blockwise reads W[K, N] column by column: from a Linear layer's [N, K] checkpoint tensor
        // (the usual chain: source, transposed, cast) it reads the untransposed tensor's rows instead.
        auto u = p.block == 0 ? std::nullopt : untransposed(n.children[0]);
        if (quantized_in_chunks(n)) {
          q.result = quantize_nk_in_chunks(*u, q.K, q.N, p);
        } else {
          std::optional<Tensor> nk = u ? std::optional<Tensor>(with_casts_f32(u->nk.materialize(), u->casts)) : std::nullopt;
          Tensor w = nk ? std::move(*nk) : n.children[0].materialize().cast(DType::F32);
          q.result = p.block == 0
                         ? quant::quantize_per_channel_int8(w.as<float>(), q.K, q.N, p.symmetric, p.scale_dtype)
                         : quant::quantize_blockwise(w.as<float>(), q.K, q.N, p.bits, p.block, p.symmetric, p.scale_dtype,
                                                     bool(nk));
        }
        q.result = quant::relayout(std::move(*q.result), q.K, q.N, p.bits, p.block, p.symmetric, p.layout);
        q.taken = 0;
      }
      return take_quantized_part(n, q);
    }
    case Node::Reshape: {
      Tensor src = n.children[0].materialize();
      Tensor t(n.dtype, n.shape);
      std::memcpy(t.data(), src.data(), t.nbytes());
      return t;
    }
  }
  HFX_CHECK(false, "unreachable");
}

}  // namespace hfx::ir
