// The network the Mamba-2 hybrids share (granitemoehybrid, bamba: mamba2_hybrid.cc; nemotron_h:
// nemotron_h.cc). Each family's file parses its config.json into a HybridConfig; this builds it.
//
// A layer is a pre-norm, one block (a Mamba-2 mixer, GQA attention, or, for Nemotron-H, an MLP or a
// sparse mixture of experts) and a
// residual; Granite and Bamba follow every mixer or attention block with a second pre-norm, their
// feed-forward block and a residual in the same layer:
//
//   h ─ mixer_norm ─ block ─ * r ─ + ─┬─ [ffn_norm ─ ffn (+ experts) ─ * r ─ + ─] ─ next layer
//
// where r is Granite's residual_multiplier (1 for the others), and Granite's sparse MoE models add a
// mixture of experts (block_sparse_moe) to the shared_mlp's output on every layer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/blocks.h"
#include "models/mamba2_mixer.h"
#include "models/model.h"
#include "models/moe.h"
#include "models/rope.h"
#include "models/sigmoid_moe.h"

namespace hfx::models {

// What a layer's (first) block computes.
enum class HybridBlock { Mamba, Attention, Mlp, Moe };

// A feed-forward network's form.
enum class HybridFfn {
  SharedMlp,   // GraniteMoeHybridMLP: one fused input_linear [2 S, hidden] split into (gate, up), output_linear
  GatedMlp,    // BambaMLP (Llama's): down(act(gate(x)) * up(x))
  UpDown,      // NemotronHMLP: down(act(up(x))), no gate
};

// Checkpoint names and wiring that tell the families apart.
struct HybridTraits {
  std::string model_type, hf_class;
  std::string base = "model.";               // the base model's prefix (Nemotron-H's saved checkpoints: backbone.)
  std::string embed = "embed_tokens";        // under base: the token embedding
  std::string final_norm = "norm";           // under base: the norm before lm_head
  std::string mixer_norm = "input_layernorm";  // under a layer: the norm before its first block
  // Under a layer: the modules holding each kind of block (Nemotron-H names them all "mixer").
  std::string mamba = "mamba", attention = "self_attn", mlp = "mlp", moe = "moe";
  // The feed-forward block after the mixer or attention (Granite, Bamba): its norm and module under
  // the layer. An empty ffn_norm: no such block (Nemotron-H's MLPs are layers of their own, HybridBlock::Mlp).
  std::string ffn_norm, ffn;
  HybridFfn ffn_kind = HybridFfn::GatedMlp;  // the form of every feed-forward network, either placement
  std::string ffn_experts = "block_sparse_moe";  // under a layer: HybridConfig::ffn_experts' module
};

struct HybridConfig {
  HybridTraits traits;
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  std::vector<HybridBlock> layers;  // per layer
  double eps = 1e-6;                // the model's RMSNorms
  // Attention: heads, head_dim, scores scaled by attention_scale, rope or none.
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  double attention_scale = 1.0;
  bool attention_bias = false;
  std::optional<RopeSpec> rope;
  // Feed-forward: intermediate_size (shared_intermediate_size for Granite's shared_mlp).
  int64_t intermediate_size = 0;
  bool mlp_bias = false;
  Activation act = Activation::Silu;
  Mamba2MixerSpec mixer;
  SigmoidMoeSpec moe;  // the HybridBlock::Moe layers' (Nemotron-H's)
  // Granite's sparse MoE (GraniteMoeHybridMoE) under traits.ffn_experts, added to every feed-forward
  // network's output (moe(x) + shared_mlp(x)); none for the dense models.
  std::optional<MoeSpec> ffn_experts;
  // Granite's multipliers (1 elsewhere; a multiplication by 1 is left out of the graph).
  double embedding_multiplier = 1.0, residual_multiplier = 1.0, logits_scaling = 1.0;
  bool tie_word_embeddings = false;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

std::unique_ptr<CausalLm> make_mamba2_hybrid(const io::Checkpoint& ckpt, HybridConfig config);

}  // namespace hfx::models
