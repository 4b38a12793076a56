// Where one weight's bytes can be found in, or computed from, another's: the parts of a concatenation
// (WeightBlock), a 2-D weight's transposed twin, and a quantized part in another layout. WrittenWeights
// uses them so an export that writes two formats reads each checkpoint weight once.
#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "ir/weight.h"
#include "ir/weight_node.h"
#include "quant/quantize.h"

namespace hfx::ir {

std::optional<WeightRef> WeightRef::transposed_under_casts() const {
  if (shape().size() != 2) return std::nullopt;
  if (node_->kind == Node::Cast) return node_->children[0].transposed_under_casts()->cast(dtype());
  return transposed({1, 0});
}

bool is_checkpoint_matrix(const WeightRef* w) {
  return w && !w->is_constant() && w->shape().size() == 2 && is_float(w->dtype());
}

bool WeightRef::is_transpose_under_casts() const {
  if (node_->kind == Node::Cast) return node_->children[0].is_transpose_under_casts();
  return node_->kind == Node::Transpose && node_->perm == std::vector<int64_t>{1, 0};
}

std::optional<StoredMatrix> WeightRef::stored_matrix() const {
  const Node& n = *node_;
  if (n.shape.size() != 2) return std::nullopt;
  switch (n.kind) {
    case Node::Source:
      if (n.dtype != DType::F32 && n.dtype != DType::BF16 && n.dtype != DType::F16) return std::nullopt;
      return StoredMatrix{n.file->data() + n.offset, n.dtype, n.shape[0], n.shape[1], false, n.file.get()};
    case Node::Cast: {  // only widenings: a half-precision value is exact in f32
      if (n.dtype != DType::F32) return std::nullopt;
      return n.children[0].stored_matrix();
    }
    case Node::Transpose: {
      auto m = n.children[0].stored_matrix();
      if (m && n.perm == std::vector<int64_t>{1, 0}) m->transposed = !m->transposed;
      return m;
    }
    case Node::Concat: {  // rows of stored matrices of one dtype and width, stacked
      if (n.axis != 0) return std::nullopt;
      StoredMatrix stacked{nullptr, n.dtype, n.shape[0], n.shape[1], false, nullptr};
      for (const WeightRef& c : n.children) {
        auto m = c.stored_matrix();
        if (!m || m->transposed || !m->stack.empty() || m->dtype != n.dtype || m->cols != n.shape[1]) return std::nullopt;
        stacked.stack.push_back(std::move(*m));
      }
      return stacked;
    }
    default: return std::nullopt;
  }
}

std::vector<WeightRef> WeightRef::quantized_in(quant::Layout from) const {
  const Node& n = *node_;
  if (n.kind != Node::Quantized) return {};
  QuantParams p = n.quant->params;
  auto kn = [&](quant::Layout l) { return l == quant::Layout::BlockedKN || (p.block == 0 && l == quant::Layout::MatMulNBits); };
  // Nothing to relay: the same layout (per channel, MatMulNBits' is BlockedKN's), or MatMulNBits,
  // which is computed from the checkpoint.
  if (p.layout == from || p.layout == quant::Layout::MatMulNBits || (kn(p.layout) && kn(from))) return {};
  p.layout = from;
  return n.children[0].quantized(p);
}

Tensor WeightRef::relaid_from(quant::Layout from, const std::vector<std::span<const uint8_t>>& parts) const {
  const Node& n = *node_;
  QuantState& s = *n.quant;
  const QuantParams& p = s.params;
  std::lock_guard<std::mutex> lock(s.mutex);
  // The parts share one result, as when they quantize the checkpoint: relaid once, handed out part by part.
  if (needs_quantizing(n, s)) {
    const std::vector<WeightRef> siblings = quantized_in(from);
    HFX_CHECK(!siblings.empty() && parts.size() == siblings.size(), "{}: relaid from {} parts", describe(), parts.size());
    for (size_t i = 0; i < parts.size(); ++i)
      HFX_CHECK(parts[i].size() == siblings[i].nbytes(), "{}: part {} of {} bytes, expected {}", describe(), i,
                parts[i].size(), siblings[i].nbytes());
    quant::Quantized q;
    q.data.assign(parts[0].begin(), parts[0].end());
    q.scales.resize(size_t(numel_of(siblings[1].shape())));
    convert_elements(siblings[1].dtype(), parts[1].data(), DType::F32, q.scales.data(), q.scales.size());
    if (parts.size() > 2) q.zero_points.assign(parts[2].begin(), parts[2].end());
    s.result = quant::relayout_between(q, s.K, s.N, p.bits, p.block, p.symmetric, from, p.layout);
    s.taken = 0;
  }
  return take_quantized_part(n, s);
}

// A MatMulNBits part quantizing Transpose(Concat([N_i, K] parts, 0)), the packed q|k|v: column n's blocks
// are row n of the data, scales and zero points, so each part's own quantization sits in rows
// [n0, n0 + N_i) of each (per channel the data stays [K, N]: a block of columns).
std::vector<WeightBlock> WeightRef::quantized_blocks() const {
  const Node& n = *node_;
  const QuantParams& p = n.quant->params;
  if (p.layout != quant::Layout::MatMulNBits) return {};
  const int64_t K = n.quant->K, N = n.quant->N;
  std::vector<WeightBlock> out;
  int64_t n0 = 0;
  for (const WeightBlock& cb : n.children[0].blocks()) {
    const auto& shape = cb.part.shape();
    if (shape.size() != 2 || shape[0] != K) return {};  // stacked along K: a block would mix parts
    const int64_t ni = shape[1];
    WeightRef view = cb.part.quantized(p)[size_t(n.part)];
    const size_t bytes = view.nbytes();
    if (p.block == 0 && n.part == 0)  // per-channel data [K, N]
      out.push_back({std::move(view), size_t(n0), size_t(ni), size_t(N), K});
    else
      out.push_back({std::move(view), size_t(n0) * (bytes / size_t(ni)), bytes, bytes, 1});
    n0 += ni;
  }
  return out;
}

std::vector<WeightBlock> WeightRef::blocks() const {
  if (node_->kind == Node::Quantized) return quantized_blocks();
  // Walk down the transforms that move whole parts without mixing them, to a Concat.
  std::vector<const Node*> chain;  // top first
  const Node* n = node_.get();
  while (n->kind == Node::Cast || n->kind == Node::PlusScalar ||
         (n->kind == Node::Transpose && n->perm == std::vector<int64_t>{1, 0})) {
    chain.push_back(n);
    n = n->children[0].node();
  }
  const size_t elem = dtype_nbytes(dtype(), 2) / 2;
  if (n->kind != Node::Concat || elem == 0) return {};  // sub-byte elements do not split at part bounds
  // The concatenation axis in this weight's coordinates: a transpose puts input axis perm[i] at i.
  int64_t axis = n->axis;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    if ((*it)->kind == Node::Transpose) axis = 1 - axis;
  const auto& shape = this->shape();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < int64_t(shape.size()); ++i) {
    if (i < axis) outer *= shape[size_t(i)];
    if (i > axis) inner *= shape[size_t(i)];
  }
  std::vector<WeightBlock> out;
  int64_t at = 0;
  for (const WeightRef& part : n->children) {
    WeightRef view = part;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Node& t = **it;
      if (t.kind == Node::Transpose) view = view.transposed(t.perm);
      else if (t.kind == Node::Cast) view = view.cast(t.dtype);
      else view = view.plus_scalar(t.scalar);
    }
    const int64_t extent = part.shape()[size_t(n->axis)];
    out.push_back({view, size_t(at * inner) * elem, size_t(extent * inner) * elem,
                   size_t(shape[size_t(axis)] * inner) * elem, outer});
    at += extent;
  }
  return out;
}

}  // namespace hfx::ir
