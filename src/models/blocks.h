// Building blocks shared by the architecture definitions (every family's file in models/): norms,
// activations, projections, the per-step rope tables and masks, and the cached attention core. They
// emit canonical IR only (no target knowledge) and bind weights by their checkpoint names.
#pragma once

#include <array>

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint.h"
#include "ir/builder.h"
#include "models/model.h"
#include "models/rope.h"

namespace hfx::models {

// RMSNorm (Llama), RMSNorm times (1 + w) (Gemma, bound as a plus-one weight), LayerNorm (GPT-2).
enum class NormKind { Rms, RmsPlusOne, Layer, LayerPlusOne };  // LayerPlusOne: Nemotron's LayerNorm1P
// Transformers' ACT2FN entries hfx implements: silu/swish, gelu (erf), the tanh approximation
// (gelu_pytorch_tanh, gelu_new, gelu_fast: the same function up to rounding), relu and relu2 (relu(x)^2).
enum class Activation { Silu, Gelu, GeluTanh, Relu, Relu2 };

// Maps an ACT2FN name; Unsupported naming the field and the supported names otherwise.
Activation parse_activation(const io::JsonFile& config, const std::string& key, const std::string& value);
const char* activation_name(Activation act);
ir::ValueId activation(ir::Builder& b, ir::ValueId x, Activation act);
// act(gate) * up: SwiGLU for silu, Gelu then Mul otherwise.
ir::ValueId gated_activation(ir::Builder& b, ir::ValueId gate, ir::ValueId up, Activation act);

// x @ W^T (+ b) with W = `prefix`.weight [out, in] and b = `prefix`.bias [out].
ir::ValueId linear(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix, int64_t in,
                   int64_t out, bool bias, const std::string& why);
// Checkpoint names of a gated MLP's projections (Mixtral's experts: w1, w3, w2).
struct GatedMlpNames {
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
};
// down(act(gate(x)) * up(x)) over `prefix`<name>: Llama's MLP, each routed expert, Qwen2-MoE's shared expert.
ir::ValueId gated_mlp(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                      const GatedMlpNames& names, int64_t hidden, int64_t intermediate, bool bias, Activation act,
                      const std::string& why);
// A norm's epsilon from config.json (`key`, else `fallback`): refused unless finite and >= 0, since it
// is added to the variance under a square root (a negative one turns every small variance into NaN).
double norm_eps(const io::JsonFile& f, const nlohmann::json& obj, std::string_view key, double fallback);
// A norm over the last axis (size n) with weights `prefix`.weight (and `prefix`.bias for a LayerNorm
// with bias); opens a scope named `scope`.
ir::ValueId norm(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix, int64_t n,
                 NormKind kind, double eps, bool bias, const std::string& scope);

// [b, s, heads * d] -> [b, heads, s, d]
ir::ValueId split_heads(ir::Builder& b, ir::ValueId x, int64_t heads, int64_t head_dim);
// A fused projection laid out per head as [q | k | v] (GPT-NeoX, GPT-BigCode without multi_query):
// [b, s, heads * 3d] -> q, k, v [b, heads, s, d].
std::array<ir::ValueId, 3> split_qkv_per_head(ir::Builder& b, ir::ValueId qkv, int64_t heads, int64_t head_dim);

// What every layer of one step shares: rope tables and attention masks, each built once on first use.
class StepTables {
 public:
  StepTables(ir::Builder& b, const CausalLmInputs& in) : b_(b), in_(in) {}
  // cos, sin [b, s, rotary_dim] for `rope` (key: one entry per distinct rope of the model).
  const std::vector<ir::ValueId>& rope(const RopeSpec& rope, size_t key = 0);
  // Additive bias [b, 1, s, t]: causal and padding, and a sliding window when window > 0.
  ir::ValueId mask(int64_t window);

 private:
  ir::Builder& b_;
  const CausalLmInputs& in_;
  std::map<size_t, std::vector<ir::ValueId>> ropes_;
  std::map<int64_t, ir::ValueId> masks_;
};

struct AttentionOut {
  ir::ValueId out = ir::kNone;  // [b, s, heads * head_dim], before the output projection
  ir::ValueId present_key = ir::kNone, present_value = ir::kNone;
};
// q [b, hq, s, d] and k, v [b, hkv, s, d] (rope applied): appends k, v to layer `layer`'s cache (or
// writes them in place for a static cache), attends with `scale` (and soft-capped scores when
// softcap > 0), and merges the heads.
AttentionOut cached_attention(ir::Builder& b, const CausalLmInputs& in, int64_t layer, ir::ValueId q, ir::ValueId k,
                              ir::ValueId v, ir::ValueId mask, double scale, double softcap = 0);

// A low-rank adapter (Zamba2's, formally LoRA): nn.Sequential(Linear(in, rank), Linear(rank, out)),
// no biases, its weights `prefix`.0.weight [rank, in] and `prefix`.1.weight [out, rank].
ir::ValueId low_rank_adapter(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                             int64_t in, int64_t rank, int64_t out, const std::string& why);

// A hybrid's GQA attention layer from its checkpoint: q_proj, k_proj, v_proj and o_proj under `prefix`
// (with biases when `bias`), rope when given, the cache and the step's causal/padding mask
// (cached_attention), scores scaled by `scale`. out is after o_proj: [b, s, hidden].
struct ProjectedAttention {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double scale = 1.0;
  bool bias = false;
  const RopeSpec* rope = nullptr;
  double key_multiplier = 1.0;  // k_proj's output times this before rope (Falcon-H1's muP key_multiplier)
  int64_t input = 0;  // the q/k/v projections' input width; 0: hidden (Zamba2's is 2 * hidden)
  // Full names of low-rank adapters added to q, k and v before the heads split (Zamba2's
  // per-invocation adapters on a shared block), empty for none; each is input -> rank -> its
  // projection's width.
  std::array<std::string, 3> adapters;
  int64_t adapter_rank = 0;
};
AttentionOut projected_attention(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                                 const CausalLmInputs& in, int64_t layer, StepTables& tables, const ProjectedAttention& spec);

// The output projection: lm_head.weight, or the embedding matrix when tied (a saved copy of the tie
// is accounted for).
ir::ValueId lm_head(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId h, ir::ValueId embed, bool tied,
                    int64_t vocab, int64_t hidden, const std::string& head_name = "lm_head.weight", bool bias = false);

// num_attention_heads and num_key_value_heads (default: the heads) from `config`, checked: kv heads
// divide heads, heads divide hidden_size (errors name the file and both numbers).
struct HeadCounts {
  int64_t heads = 0, kv_heads = 0;
};
HeadCounts parse_head_counts(const io::JsonFile& config, int64_t hidden_size);

// eos/bos/pad ids: generation_config.json wins over config.json, as in Transformers' generate(). An
// id at or past `vocab_size` is dropped with a warning naming the file and field: no step can produce
// it, and as padding it would index past the embedding.
void read_generation_ids(const io::Checkpoint& ckpt, int64_t vocab_size, std::vector<int64_t>& eos,
                         std::optional<int64_t>& bos, std::optional<int64_t>& pad);

}  // namespace hfx::models
