#include "passes/pass.h"

#include "core/error.h"
#include "passes/precision.h"

namespace hfx::passes {

const std::vector<PassInfo>& all_passes() {
  static const std::vector<PassInfo> passes = {
      {"decompose-composites", Stage::BackendTranslation,
       "Replaces high-level ops (Linear, RMSNorm, Attention, ...) by their reference decompositions into "
       "standard primitives.",
       "The backend declares no fused form for these ops, so it gets the primitives every runtime has.",
       "Never for backends without fused kernels; per op, once the backend's capability record lists a "
       "fused lowering for it.",
       decompose_composites},
      {"decompose-composites-keep-attention", Stage::BackendTranslation,
       "decompose-composites, except Attention, which the openvino backend lowers to opset-13 "
       "ScaledDotProductAttention.",
       "OpenVINO's CPU plugin runs SDPA as one fused kernel, and OpenVINO GenAI's paged-attention (continuous "
       "batching) conversion starts from SDPA ops fed by the KV state.",
       "Never for OpenVINO; per op, as more composites get OpenVINO lowerings.",
       [](const ir::Graph& g) { return decompose_composites_except(g, {"Attention"}); }},
      {"decompose-composites-keep-linear-embedding", Stage::BackendTranslation,
       "pt2: as decompose-composites, but Linear and Embedding stay whole (aten.linear, aten.embedding).",
       "Transformers runs nn.Linear and nn.Embedding as those ATen ops; keeping them gives torch the same kernels "
       "(and summation order) as eager, and AOTInductor and ExecuTorch the ops they pattern-match.",
       "Never for pt2; per op, as more composites get ATen lowerings.",
       [](const ir::Graph& g) { return decompose_composites_except(g, {"Linear", "Embedding"}); }},
      {"fold-weight-transforms", Stage::BackendTranslation,
       "Folds Transpose and Cast applied to weights into the stored tensor, so a Linear becomes one MatMul "
       "against a [in, out] initializer.",
       "Transformers stores Linear weights as [out, in]; runtimes want the MatMul operand laid out [in, out] "
       "and should not transpose weights at load or run time.",
       "Never: it is a property of the checkpoint layout.",
       fold_weight_transforms},
      {"ort-contrib-ops", Stage::BackendTranslation,
       "onnx --onnx-profile ort: Attention + rotary + cache append become com.microsoft GroupQueryAttention "
       "(cos/sin caches, packed QKV), RMSNorm becomes (Skip)SimplifiedLayerNormalization.",
       "ONNX Runtime's CPU kernels and onnxruntime-genai's shared KV buffer are built around these fused ops.",
       "Never for ONNX Runtime; models whose attention the fused op cannot express keep the portable lowering.",
       [](const ir::Graph& g) { return ort_contrib_ops(g, {4096}); }},
      {"ort-state-ops", Stage::BackendTranslation,
       "onnx --onnx-profile ort, hybrids: the causal conv, the gated delta rule and the Mamba scans become "
       "com.microsoft CausalConvWithState and LinearAttention; attention keeps the portable lowering.",
       "ONNX Runtime 1.31 runs each as one CPU kernel (onnxruntime-genai's builder writes them for Qwen3.5) where "
       "the portable lowering is dozens of primitives per layer.",
       "Never for ONNX Runtime.",
       ort_state_ops},
      {"scan-recurrences", Stage::BackendTranslation,
       "onnx --onnx-profile portable --onnx-recurrence scan: the gated delta rule and the Mamba scans become "
       "RecurrenceScan, written as an ONNX Scan over time whose body is one recurrent step; the causal conv stays "
       "loop-free.",
       "A Scan's memory is linear in the prompt length and its body is Transformers' recurrent update, for runtimes "
       "where the chunked lowering's [chunk, chunk] and [n, n] products cost more than a loop (Mamba-1's "
       "chunked prefill is quadratic in memory).",
       "Never: it is an export option.",
       scan_recurrences},
      {"onnx-standard-ops", Stage::BackendTranslation,
       "onnx, every profile: LayerNorm and Gelu become ONNX LayerNormalization (opset 17) and Gelu (opset 20); "
       "with --onnx-opset 23 (portable profile) also RMSNorm, RotaryEmbedding and Attention become opset-23 "
       "RMSNormalization, RotaryEmbedding and Attention, where those ops compute them exactly; the rest is decomposed.",
       "Runtimes run each standard op as one fused kernel instead of a dozen primitives; ONNX Runtime's own "
       "fusions do not recognise hfx's decomposition order.",
       "Never for ONNX; per op, once the ONNX op's semantics cover what still falls back.",
       [](const ir::Graph& g) { return onnx_standard_ops(g, 23); }},
      {"ort-fused-matmul", Stage::BackendTranslation,
       "onnx --onnx-profile ort, last: a Linear layer's f32 product (bf16 weights widened at use included) reads "
       "the weight as the checkpoint stores it, [out, in], through com.microsoft FusedMatMul(transB=1) instead "
       "of MatMul over its transpose; quantized and f16 products keep their form.",
       "ONNX Runtime's sessions that do not prepack weights (the export's check) run the transposed-B GEMM about "
       "1.6x faster per decode step, prepacked ones as fast; the export then transposes no weight.",
       "Never for ONNX Runtime.",
       ort_fused_matmul},
      {"apply-precision", Stage::BackendTranslation,
       "--dtype / --quantize: Linear layers' weights stored in f16/bf16 or quantized (MatMulNBits, or "
       "DequantizeLinear + MatMul), embeddings in the dtype; runs after fold-weight-transforms (and on `hfx "
       "verify`'s reference). Options from the recipe; from this table it runs the default f32 (no change).",
       "Weight-only quantization and half precision are what make large models fit; docs/quantization.md.",
       "Never: precision is an export option.",
       [](const ir::Graph& g) { return apply_precision(g, {}); }},
  };
  return passes;
}

const PassInfo& find_pass(const std::string& name) {
  for (const auto& p : all_passes())
    if (p.name == name) return p;
  unsupported("unknown pass `{}`", name);
}

ir::Graph run_pipeline(const ir::Graph& graph, const std::vector<std::string>& names, std::vector<std::string>* applied) {
  ir::Graph g = graph;
  for (const auto& name : names) {
    const PassInfo& p = find_pass(name);
    g = with_context("pass " + name, [&] { return p.run(g); });
    g.validate();
    if (applied) applied->push_back(name);
  }
  return g;
}

}  // namespace hfx::passes
