// Passes are declared as data: a stable kebab-case name, what it does, why it exists, and when it
// can be deleted. The manifest's pass list records the names; the rest documents each pass where it
// is declared (pass.cc), so a repair cannot be added without saying when it may go.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hfx::passes {

enum class Stage { Model, IrRepair, BackendTranslation, BackendFix };

struct PassInfo {
  std::string name;
  Stage stage;
  std::string summary;
  std::string reason;
  std::string delete_when;
  std::function<ir::Graph(const ir::Graph&)> run;
};

const std::vector<PassInfo>& all_passes();
const PassInfo& find_pass(const std::string& name);

// Runs the named passes in order; returns the final graph. `applied` receives their names.
ir::Graph run_pipeline(const ir::Graph& graph, const std::vector<std::string>& names,
                       std::vector<std::string>* applied = nullptr);

// The passes themselves (one file each).
ir::Graph decompose_composites(const ir::Graph& graph);
// The same, leaving the composite ops named in `keep` for a backend that lowers them itself.
ir::Graph decompose_composites_except(const ir::Graph& graph, const std::set<std::string>& keep);
ir::Graph fold_weight_transforms(const ir::Graph& graph);

// The ONNX backend's `ort` profile (ort_contrib_ops.cc): composites -> ONNX Runtime's fused ops.
struct OrtContribOptions {
  int64_t rope_cache_rows = 0;  // rows of the cos/sin caches: the longest sequence the export serves
};
// Above this many rows (2^20: every released context length up to 1 M tokens keeps its table) the
// cos/sin caches are computed per step in the graph instead of written as tables.
inline constexpr int64_t kMaxRopeCacheRows = int64_t(1) << 20;
// Bytes of the precomputed cos/sin caches ort_contrib_ops writes for `graph` with `rows` rows (0 when
// computed in the graph), for the preflight.
int64_t ort_rope_cache_bytes(const ir::Graph& graph, int64_t rows);
ir::Graph ort_contrib_ops(const ir::Graph& graph, const OrtContribOptions& options);
// Why the fused lowering cannot express this graph's attention (empty: it can).
std::vector<std::string> ort_profile_blockers(const ir::Graph& graph);

// The ONNX backend's `ort` profile for a hybrid's recurrent layers (ort_state_ops.cc): CausalConv,
// GatedDeltaRule and SsdScan -> com.microsoft CausalConvWithState and LinearAttention; attention is left
// as it is.
ir::Graph ort_state_ops(const ir::Graph& graph);

// The ONNX backend's `ort` profile, after the precision (ort_fused_matmul.cc): products over a Linear
// layer's transposed f32 (or widened bf16) weight -> the target op FusedMatMul (x @ W^T) over the stored
// [N, K] weight, com.microsoft FusedMatMul(transB=1) in the file.
ir::Graph ort_fused_matmul(const ir::Graph& graph);

// The ONNX backend's `--onnx-recurrence scan` (scan_recurrences.cc): GatedDeltaRule and SsdScan ->
// RecurrenceScan, which the writer writes as an ONNX Scan over time; CausalConv is left as it is.
ir::Graph scan_recurrences(const ir::Graph& graph);
// Whether `graph` holds a recurrence scan_recurrences rewrites.
bool has_recurrences(const ir::Graph& graph);

// The ONNX backend's standard fused ops (onnx_standard_ops.cc), per node where they compute the
// composite exactly: LayerNorm -> LayerNormalization (opset >= 17) and Gelu -> Gelu (opset >= 20);
// at opset >= 23 also RMSNorm, RotaryEmbedding and Attention -> RMSNormalization, RotaryEmbedding and
// Attention. `notes` receives why opset-23 candidates stay decomposed (each reason once).
ir::Graph onnx_standard_ops(const ir::Graph& graph, int64_t opset, std::vector<std::string>* notes = nullptr);

}  // namespace hfx::passes
