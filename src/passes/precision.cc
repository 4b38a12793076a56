#include "passes/precision.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "ir/rewrite.h"

namespace hfx::passes {

namespace {

// A product the model asks to keep in f32 (ir::Builder::kKeepF32Scope): Transformers computes it in f32
// from the weight as the model's dtype holds it.
bool keeps_f32(const ir::Node& node) {
  return node.name.find(fmt::format("/{}/", ir::Builder::kKeepF32Scope)) != std::string::npos;
}

class Precision {
 public:
  Precision(const ir::Graph& g, const quant::PrecisionSpec& spec, PrecisionTarget target)
      : src_(g), spec_(spec), target_(target), r_(g) {}

  ir::Graph run() {
    for (const auto& node : src_.nodes()) {
      ir::Node n = r_.mapped(node);
      std::optional<ir::ValueId> y;
      with_context("apply-precision: " + node.name, [&] {
        if (node.op == "Linear" && node.inputs.size() >= 2) {
          if (const auto* w = src_.weight(node.inputs[1]); ir::is_checkpoint_matrix(w) && target_ == PrecisionTarget::ExecuTorch) {
            y = kept_linear(node, n.inputs[0], *w, node.inputs[1]);
            if (y && n.input(2) != ir::kNone) y = r_.builder().plus(*y, n.inputs[2]);
          } else if (ir::is_checkpoint_matrix(w)) {
            y = linear(node, n.inputs[0], w->transposed({1, 0}), src_.value(node.inputs[1]).name + ".T");
            if (y && n.input(2) != ir::kNone) y = r_.builder().plus(*y, n.inputs[2]);
          }
        } else if (node.op == "MatMul") {
          if (const auto* w = src_.weight(node.inputs[1]); ir::is_checkpoint_matrix(w))
            y = linear(node, n.inputs[0], *w, src_.value(node.inputs[1]).name);
          else if (const auto table = transposed_weight(node.inputs[1]))  // a tied lm_head (fold-weight-transforms)
            y = linear(node, n.inputs[0], src_.weight(*table)->transposed({1, 0}), src_.value(*table).name + ".T", table);
        } else if (node.op == "Embedding" || (node.op == "Gather" && node.attr_int("axis", 0) == 0)) {
          if (const auto* w = src_.weight(node.inputs[0]); ir::is_checkpoint_matrix(w)) {
            if (spec_.quantize_embeddings && spec_.quant.enabled()) {
              y = quantized_embedding(node, n.inputs[1], *w, node.inputs[0]);
            } else if (spec_.dtype != DType::F32) {
              auto& b = r_.builder();
              auto scope = b.scope(node.name.substr(node.name.front() == '/' ? 1 : 0));
              ir::ValueId table = b.weight(unique(src_.value(node.inputs[0]).name + "." + std::string(dtype_name(spec_.dtype))),
                                           w->cast(spec_.dtype));
              cast_tables_[node.inputs[0]] = table;
              y = b.cast(b.add1("Gather", {table, n.inputs[1]}, {{"axis", int64_t(0)}}), DType::F32);
            }
          }
        }
      });
      if (y)
        r_.replace(node, {*y});
      else
        r_.copy(node, n);
    }
    return r_.finish();
  }

 private:
  // W (a source weight) when `v` is Transpose(W, perm 1,0) of a checkpoint matrix (kept in the graph for
  // a tied weight).
  std::optional<ir::ValueId> transposed_weight(ir::ValueId v) const {
    const int32_t p = src_.value(v).producer;
    if (p < 0) return std::nullopt;
    const ir::Node& t = src_.nodes()[size_t(p)];
    if (t.op != "Transpose" || t.attr_ints("perm") != std::vector<int64_t>{1, 0}) return std::nullopt;
    if (!ir::is_checkpoint_matrix(src_.weight(t.inputs[0]))) return std::nullopt;
    return t.inputs[0];
  }

  // The dtype a quantized layer's activations (and scales) are in: ONNX targets compute Linear layers in
  // f16 when the dtype is f16; bf16, f32 and OpenVINO (whose CPU plugin decompresses weights inside its
  // f32 FullyConnected) compute in f32.
  DType compute_dtype() const {
    return spec_.dtype == DType::F16 && target_ != PrecisionTarget::OpenVino ? DType::F16 : DType::F32;
  }

  // x[..., K] @ w[K, N] in the spec's precision; nullopt when nothing changes (f32, not quantized).
  // `table` names the embedding table a tied lm_head reads, whose quantized bytes the embedding shares.
  std::optional<ir::ValueId> linear(const ir::Node& node, ir::ValueId x, const ir::WeightRef& w, const std::string& base,
                                    std::optional<ir::ValueId> table = std::nullopt) {
    const bool lm_head = node.name.find("/lm_head/") != std::string::npos, keep_f32 = keeps_f32(node);
    const bool quantize = spec_.quant.enabled() && (!lm_head || spec_.quantize_lm_head) && !keep_f32;
    const DType dt = spec_.dtype;
    if (!quantize && dt == DType::F32) return std::nullopt;
    auto& b = r_.builder();
    auto scope = b.scope(node.name.substr(node.name.front() == '/' ? 1 : 0));
    const DType compute = keep_f32 ? DType::F32 : compute_dtype();
    const ir::WeightRef stored = w.cast(dt);
    ir::ValueId xin = compute == DType::F32 ? x : b.cast(x, compute);
    ir::ValueId y;
    // A tied lm_head reads its embedding's f16 / bf16 table (transposed in the graph, as f32 exports
    // do): the table is written, and read from the checkpoint, once.
    const auto shared = table ? cast_tables_.find(*table) : cast_tables_.end();
    if (quantize) {
      y = quantized(xin, stored, base, compute, table);
    } else if (target_ == PrecisionTarget::OpenVino) {  // Constant [N, K] f16|bf16 -> Convert f32 -> MatMul(transpose_b)
      const ir::ValueId wt = shared != cast_tables_.end()
                                 ? shared->second  // the table is [N, K] already
                                 : b.weight(unique(fmt::format("{}.{}", base, dtype_name(dt))), w.transposed({1, 0}).cast(dt));
      y = b.matmul(xin, b.transpose(b.cast(wt, DType::F32), {1, 0}));
    } else {
      const ir::ValueId wt = shared != cast_tables_.end()
                                 ? b.transpose(shared->second, {1, 0})
                                 : b.weight(unique(fmt::format("{}.{}", base, dtype_name(dt))), stored);
      // f16: computed in f16; bf16 (and a kept-f32 product): stored in the dtype, cast to f32 at use
      y = b.matmul(xin, compute == DType::F16 ? wt : b.cast(wt, DType::F32));
    }
    return compute == DType::F32 ? y : b.cast(y, DType::F32);
  }

  // x[..., K] @ w[N, K]^T kept a Linear (the ExecuTorch target); nullopt when nothing changes. A tied
  // lm_head reads its embedding's f16 / bf16 table, [N, K] already.
  std::optional<ir::ValueId> kept_linear(const ir::Node& node, ir::ValueId x, const ir::WeightRef& w, ir::ValueId source) {
    const bool lm_head = node.name.find("/lm_head/") != std::string::npos, keep_f32 = keeps_f32(node);
    const auto& q = spec_.quant;
    const bool quantize = q.enabled() && (!lm_head || spec_.quantize_lm_head) && !keep_f32;
    const DType dt = spec_.dtype;
    if (!quantize && dt == DType::F32) return std::nullopt;
    auto& b = r_.builder();
    auto scope = b.scope(node.name.substr(node.name.front() == '/' ? 1 : 0));
    if (quantize) {
      // Weight-only int8 per output channel, symmetric: XNNPACK's f32 x qc8w FullyConnected. The weight
      // is rounded to the dtype first, as every target quantizes it; the layer computes in f32.
      if (q.bits != 8 || q.block != 0 || !q.symmetric)
        unsupported("--quantize {} with --format executorch: ExecuTorch programs take weight-only int8:channel (symmetric) "
                    "only, XNNPACK's f32 x int8-per-channel FullyConnected (its blockwise kernels quantize the activations too)",
                    q.str());
      const int64_t N = w.shape()[0];
      ir::WeightRef::QuantParams params{8, 0, true, DType::F32, quant::Layout::BlockedNK};  // [N, K] values, [N, 1] scales
      const auto parts = w.transposed({1, 0}).cast(dt).quantized(params);
      const std::string tag = src_.value(source).name + ".q8";
      const ir::ValueId values = b.weight(unique(tag), parts[0]);
      const ir::ValueId scales = b.weight(unique(tag + ".scales"), parts[1].reshaped({N}));
      return b.add1("Linear", {x, b.add1("DequantizeLinear", {values, scales}, {{"axis", int64_t(0)}})});
    }
    const auto shared = cast_tables_.find(source);
    const ir::ValueId wt = shared != cast_tables_.end()
                               ? shared->second
                               : b.weight(unique(fmt::format("{}.{}", src_.value(source).name, dtype_name(dt))), w.cast(dt));
    if (dt == DType::BF16 || keep_f32) return b.add1("Linear", {x, b.cast(wt, DType::F32)});  // stored in the dtype, f32 at use
    return b.cast(b.add1("Linear", {b.cast(x, DType::F16), wt}), DType::F32);
  }

  // The block a layer of depth K is quantized in: never more than K rounded up to a block size
  // MatMulNBits runs (16 .. 256): int8's blocks of 128 over K = 64 would be half padding.
  // OpenVINO's compressed weights take whole groups: a K that is not a multiple of the block gets the
  // largest divisor of K below the block that is a multiple of 8, no less than 16 (Whisper's conv stem,
  // K = 3 x 80 mel bins: groups of 24 for int4's 32), else one group over all of K, as optimum-intel's
  // --group-size-fallback adjust does. Multiples of 8: the blocks the quantizer packs (quantize_blockwise).
  int64_t block_for(int64_t K) const {
    int64_t block = spec_.quant.block;
    while (block > 16 && block / 2 >= K) block /= 2;
    if (target_ == PrecisionTarget::OpenVino && block && quant::k_blocks(K, block) > 1 && K % block != 0) {
      int64_t group = block;
      while (group >= 16 && (K % group != 0 || group % 8 != 0)) --group;
      return group >= 16 ? group : K;
    }
    return block;
  }

  // How a [K, N] weight is quantized for the target: MatMulNBits' layout (ort), DequantizeLinear's [K, N]
  // (portable) or OpenVINO's [N, K/block, block], which takes whole groups only (`what` names the flag).
  ir::WeightRef::QuantParams quant_params(int64_t K, int64_t block, DType compute, const std::string& what) const {
    const auto& q = spec_.quant;
    ir::WeightRef::QuantParams params{q.bits, block, q.symmetric, compute};
    if (target_ == PrecisionTarget::Portable) params.layout = quant::Layout::BlockedKN;
    if (target_ == PrecisionTarget::OpenVino) {
      params.layout = quant::Layout::BlockedNK;
      if (block && quant::k_blocks(K, block) > 1 && K % block != 0)
        bad_input("--quantize {}{} with --format openvino: K = {} is not a multiple of the block size {}, and "
                  "OpenVINO's compressed weights take whole groups (choose a block that divides K)",
                  q.str(), what.empty() ? "" : " " + what, K, block);
    }
    return params;
  }

  // OpenVINO's decompressed [N, K] weight from its quantized tensors: [N, K/block, block] groups (axis 2),
  // or [N, K] with one scale per row (axis 1; per channel, or one block over K).
  ir::ValueId openvino_decompressed(const std::vector<ir::ValueId>& parts, int64_t N, int64_t K, int64_t block) {
    auto& b = r_.builder();
    if (!block || quant::k_blocks(K, block) == 1) return b.add1("DequantizeLinear", parts, {{"axis", int64_t(1)}, {"block_size", K}});
    return b.reshape(b.add1("DequantizeLinear", parts, {{"axis", int64_t(2)}, {"block_size", block}}), {N, K});
  }

  // The quantized tensors of stored[K, N] (data, scales[, zero points]) as weights of the new graph. A
  // table's are made once: a tied lm_head and its embedding read the same bytes.
  std::vector<ir::ValueId> quantized_weights(const ir::WeightRef& stored, const std::string& base,
                                             const ir::WeightRef::QuantParams& params, std::optional<ir::ValueId> table) {
    if (table)
      if (auto it = shared_.find(*table); it != shared_.end()) return it->second;
    auto& b = r_.builder();
    auto parts = stored.quantized(params);
    const std::string tag = fmt::format("{}.q{}", base, params.bits);
    std::vector<ir::ValueId> ins = {b.weight(unique(tag), parts[0]), b.weight(unique(tag + ".scales"), parts[1])};
    if (parts.size() > 2) ins.push_back(b.weight(unique(tag + ".zero_points"), parts[2]));
    if (table) shared_[*table] = ins;
    return ins;
  }

  // The embedding table quantized as a Linear layer of N = vocabulary rows and K = hidden is quantized:
  // the same bytes a tied, quantized lm_head reads. ort profile: GatherBlockQuantized over MatMulNBits'
  // [N, k_blocks, blob], reshaped. OpenVINO: Gather over the decompressed table (its compressed
  // [N, k_blocks, block] constant, Convert, Subtract, Multiply: the form its CPU plugin gathers from
  // without decompressing the table). The portable profile has no quantized lookup.
  ir::ValueId quantized_embedding(const ir::Node& node, ir::ValueId ids, const ir::WeightRef& w, ir::ValueId table) {
    const auto& q = spec_.quant;
    if (target_ == PrecisionTarget::Portable)
      bad_input("--quantize-embeddings: a quantized embedding table is ONNX Runtime's GatherBlockQuantized, written by "
                "--onnx-profile ort only (the portable profile has no quantized lookup)");
    if (q.block == 0) bad_input("--quantize-embeddings needs a blockwise scheme (int4 or int8:block=N), not {}", q.str());
    auto& b = r_.builder();
    auto scope = b.scope(node.name.substr(node.name.front() == '/' ? 1 : 0));
    const int64_t V = w.shape()[0], H = w.shape()[1];
    const int64_t block = block_for(H), kb = quant::k_blocks(H, block);
    const DType compute = compute_dtype();
    const auto params = quant_params(H, block, compute, "--quantize-embeddings");
    const auto parts = quantized_weights(w.transposed({1, 0}).cast(spec_.dtype), src_.value(table).name + ".T", params, table);
    if (target_ == PrecisionTarget::OpenVino) return b.add1("Gather", {openvino_decompressed(parts, V, H, block), ids}, {{"axis", int64_t(0)}});
    std::vector<ir::ValueId> ins = {b.reshape(parts[0], {V, kb * quant::blob_bytes(q.bits, block)}), ids,
                                    b.reshape(parts[1], {V, kb})};
    if (parts.size() > 2) ins.push_back(b.reshape(parts[2], {V, quant::zero_point_bytes_per_column(q.bits, H, block)}));
    ir::ValueId y = b.add1("GatherBlockQuantized", ins,
                           {{"gather_axis", int64_t(0)}, {"quantize_axis", int64_t(1)}, {"block_size", block}, {"bits", int64_t(q.bits)}});
    if (kb * block != H) y = b.slice(y, 0, H, -1);  // the padding of the last block
    return compute == DType::F32 ? y : b.cast(y, DType::F32);
  }

  // xin @ stored[K, N] with the weight quantized, in the target's form (see the header).
  ir::ValueId quantized(ir::ValueId xin, const ir::WeightRef& stored, const std::string& base, DType compute,
                        std::optional<ir::ValueId> table) {
    auto& b = r_.builder();
    const auto& q = spec_.quant;
    const int64_t K = stored.shape()[0], N = stored.shape()[1];
    const int64_t block = block_for(K);
    if (q.accuracy_level && target_ != PrecisionTarget::OrtContrib)
      bad_input("--quantize {}: accuracy= is MatMulNBits' accuracy_level, written only by --onnx-profile ort (the "
                "{} form has no such attribute; ONNX Runtime's session option session.qdq_matmulnbits_accuracy_level "
                "plays its part for DequantizeLinear + MatMul)",
                q.str(), target_ == PrecisionTarget::Portable ? "portable profile's DequantizeLinear" : "OpenVINO");
    const auto params = quant_params(K, block, compute, "");
    // A tied table's quantized tensors are shared with its embedding (blockwise; not in the portable profile).
    std::vector<ir::ValueId> ins = quantized_weights(stored, base, params, table && target_ != PrecisionTarget::Portable && block ? table : std::nullopt);
    switch (target_) {
      case PrecisionTarget::OrtContrib:
        if (block != 0) {
          ins.insert(ins.begin(), xin);
          ir::Attrs attrs{{"K", K}, {"N", N}, {"bits", int64_t(q.bits)}, {"block_size", block}};
          if (q.accuracy_level) attrs["accuracy_level"] = int64_t(q.accuracy_level);
          return b.add1("MatMulNBits", ins, attrs);
        }
        [[fallthrough]];
      case PrecisionTarget::Portable: {
        ir::Attrs attrs{{"axis", int64_t(block ? 0 : 1)}};
        // One block over all of K is written as block_size = K (same numbers, no padded block).
        if (block) attrs["block_size"] = std::min(block, K);
        return b.matmul(xin, b.add1("DequantizeLinear", ins, attrs));
      }
      case PrecisionTarget::OpenVino:
        return b.matmul(xin, b.transpose(openvino_decompressed(ins, N, K, block), {1, 0}));
      case PrecisionTarget::ExecuTorch:  // refused by kept_linear and the format's plan
        break;
    }
    HFX_CHECK(false, "unreachable");
  }

  // A weight name used by neither graph.
  std::string unique(const std::string& want) {
    std::string name = want;
    for (int i = 2; src_.find(name) || r_.target().find(name); ++i) name = fmt::format("{}.{}", want, i);
    return name;
  }

  const ir::Graph& src_;
  const quant::PrecisionSpec& spec_;
  const PrecisionTarget target_;
  ir::Rewriter r_;
  std::map<ir::ValueId, std::vector<ir::ValueId>> shared_;  // source table -> its quantized weights
  std::map<ir::ValueId, ir::ValueId> cast_tables_;  // source embedding table -> its f16 / bf16 copy (new graph)
};

}  // namespace

ir::Graph apply_precision(const ir::Graph& graph, const quant::PrecisionSpec& spec, PrecisionTarget target) {
  if (spec.is_default()) return graph;
  return Precision(graph, spec, target).run();
}

}  // namespace hfx::passes
