// Sparse mixture-of-experts MLP (Transformers' MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock,
// Qwen3_5MoeSparseMoeBlock, GraniteMoeHybridMoE): a router picks top_k of num_experts per token, and the
// block is the routing-weighted sum of those experts' gated MLPs. Built from primitives, so every
// backend and the reference executor run it as they are.
#pragma once

#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/json_fields.h"
#include "ir/builder.h"
#include "models/blocks.h"

namespace hfx::models {

// How a checkpoint stores the experts' weights.
enum class ExpertLayout {
  PerExpert,  // experts.<e>.<gate | up | down>.weight, one [out, in] matrix each (as Transformers saves Qwen's)
  Stacked,    // one [E, 2 intermediate, hidden] tensor (each expert's gate rows, then its up rows) and one
              // [E, hidden, intermediate]: Transformers 5's experts.gate_up_proj / down_proj, Granite's
              // input_linear / output_linear
};

// Which probabilities weight the picked experts.
enum class RouterScores {
  SoftmaxThenTopK,  // softmax over all experts, the top_k of those (Mixtral, Qwen; normalize_top_k may follow)
  TopKThenSoftmax,  // the top_k logits, softmax over those k (GraniteMoeHybridTopKRouter)
};

struct MoeSpec {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t hidden = 0, intermediate = 0;  // each expert's MLP: [hidden] -> [intermediate] -> [hidden]
  bool normalize_top_k = false;          // top-k weights divided by their sum (Mixtral always; Qwen's norm_topk_prob)
  Activation act = Activation::Silu;
  RouterScores scores = RouterScores::SoftmaxThenTopK;
  // Checkpoint names under the block: "<router>.weight" [E, hidden]; PerExpert:
  // "experts.<e>.<expert names>.weight"; Stacked: the two tensors' full names.
  std::string router = "gate";
  ExpertLayout layout = ExpertLayout::PerExpert;
  GatedMlpNames expert;
  std::string stacked_gate_up = "experts.gate_up_proj", stacked_down = "experts.down_proj";
  // Qwen2-MoE's shared expert, added to every token as sigmoid(shared_expert_gate(x)) * shared_expert(x)
  // (a gated MLP of this size; 0: none).
  int64_t shared_intermediate = 0;
};

// Which layers' MLP is the sparse block in Qwen's MoE families (Qwen2MoeDecoderLayer,
// Qwen3MoeDecoderLayer, Qwen3NextDecoderLayer): every decoder_sparse_step-th layer (1-based) that
// mlp_only_layers does not list; the others have a dense MLP.
std::vector<bool> qwen_sparse_moe_layers(const io::JsonFile& config, int64_t num_layers);

// x [b, s, hidden] -> [b, s, hidden]. Every expert runs on every token (dense) with weight 0 where the
// router did not pick it: the sum, over experts in index order, is what Transformers accumulates.
ir::ValueId sparse_moe(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                       const MoeSpec& spec);

}  // namespace hfx::models
