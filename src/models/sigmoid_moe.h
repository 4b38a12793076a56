// A mixture of un-gated experts behind a sigmoid router, as Transformers' NemotronHMoE (Nemotron 3
// Nano's layers; the router is NemotronHTopkRouter, DeepseekV3TopkRouter's):
//
//   scores = sigmoid(x @ gate^T)                        (f32)
//   biased = scores + e_score_correction_bias           (the bias steers the choice only)
//   with n_group groups of experts: each group scored by the sum of its two best biased scores, the
//   topk_group best groups kept, the other groups' experts out of the choice
//   chosen = top_k of biased (among the kept groups)
//   w      = scores at chosen, / their sum when norm_topk_prob, * routed_scaling_factor
//   out    = fc2(sum_e w_e * down_e(act(up_e(fc1(x))))) + shared_experts(x)
//
// fc1 / fc2 are the optional latent projections (moe_latent_size; identity without it). Built from
// primitives like models/moe.h: every expert runs on every token with weight 0 where it was not
// chosen, summed in expert order, which is the order Transformers accumulates in.
#pragma once

#include <string>

#include "io/checkpoint.h"
#include "ir/builder.h"
#include "models/blocks.h"

namespace hfx::models {

struct SigmoidMoeSpec {
  int64_t num_experts = 0, top_k = 0;
  int64_t hidden = 0, intermediate = 0, shared_intermediate = 0;
  int64_t latent = 0;  // moe_latent_size; 0: the experts read and write hidden directly
  bool normalize_top_k = true;
  double routed_scaling_factor = 1.0;
  // Group-limited routing: experts in n_group equal groups (consecutive indices), top_k chosen from the
  // topk_group best groups. n_group 1 keeps every expert.
  int64_t n_group = 1, topk_group = 1;
  bool bias = false;  // mlp_bias: the shared expert's and the latent projections' (the experts have none)
  Activation act = Activation::Relu2;
};

// x [b, s, hidden] -> [b, s, hidden]; weights under `prefix` (gate.weight, gate.e_score_correction_bias,
// experts.{e}.up_proj / down_proj, shared_experts.up_proj / down_proj, fc1_latent_proj / fc2_latent_proj).
ir::ValueId sigmoid_moe(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                        const SigmoidMoeSpec& spec);

}  // namespace hfx::models
