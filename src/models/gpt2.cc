// GPT-2: Transformers' GPT2LMHeadModel (modeling_gpt2.py). Differs from the Llama decoder in
// structure, so it has its own definition built from the shared blocks:
//   - learned absolute position embeddings: h = wte[input_ids] + wpe[position_ids]; no rope
//   - LayerNorm with bias (ln_1, ln_2, ln_f), plain MLP c_fc -> gelu_new -> c_proj
//   - Conv1D projections store their weight as [in, out]: bound transposed to Linear's [out, in]
//     (the transpose cancels against Linear's own when the backend folds it: zero copy)
//   - one c_attn projection for q, k, v, split after the matmul; multi-head attention (no GQA)
//   - scale_attn_weights / scale_attn_by_inverse_layer_idx; lm_head tied to wte unless the config unties it
// Checkpoints name tensors transformer.h.{i}... (or h.{i}... without the base-model prefix, as the
// original OpenAI conversions do; their attn.bias mask buffers are not weights).
//
// GPT-BigCode (StarCoder 1, SantaCoder: GPTBigCodeForCausalLM) is the same network with nn.Linear
// [out, in] projections and, with multi_query (the default), one key/value head: c_attn gives
// [q (n_embd) | k (head_dim) | v (head_dim)]; without it, c_attn is laid out per head as [q | k | v].
#include "models/gpt2.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "models/blocks.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

struct Gpt2Config {
  int64_t vocab_size = 0, hidden_size = 0, inner_size = 0, num_layers = 0, num_heads = 0, head_dim = 0;
  int64_t max_positions = 0;
  double eps = 1e-5;
  Activation act = Activation::GeluTanh;
  bool scale_attn_weights = true, scale_by_inverse_layer_idx = false, tie_word_embeddings = true;
  bool bigcode = false, multi_query = false;  // GPT-BigCode: Linear weights; one kv head with multi_query
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

Gpt2Config parse_gpt2_config(const io::Checkpoint& ckpt, bool bigcode) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  const std::string file = f.path.filename().string();
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  Gpt2Config c;
  c.bigcode = bigcode;
  c.multi_query = bigcode && io::optional_bool(f, j, "multi_query").value_or(true);
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  // GPT2Config's own names; hidden_size & co. are attribute aliases a hand-written file may use.
  auto dim = [&](const char* name, const char* alias, int64_t max) {
    if (auto v = io::optional_int(f, j, name, 1, max)) return *v;
    return io::require_int(f, j, alias, 1, max);
  };
  c.hidden_size = dim("n_embd", "hidden_size", kMaxDim);
  c.num_layers = dim("n_layer", "num_hidden_layers", 4096);
  c.num_heads = dim("n_head", "num_attention_heads", 4096);
  c.max_positions = dim("n_positions", "max_position_embeddings", kMaxDim);
  c.inner_size = io::optional_int(f, j, "n_inner", 1, kMaxDim).value_or(4 * c.hidden_size);
  if (c.hidden_size % c.num_heads)
    bad_input("{}: n_embd ({}) is not a multiple of n_head ({})", file, c.hidden_size, c.num_heads);
  c.head_dim = c.hidden_size / c.num_heads;
  c.eps = norm_eps(f, j, "layer_norm_epsilon", 1e-5);
  c.act = parse_activation(f, "activation_function",
                           io::optional_string(f, j, "activation_function").value_or(bigcode ? "gelu_pytorch_tanh" : "gelu_new"));
  c.scale_attn_weights = io::optional_bool(f, j, "scale_attn_weights").value_or(true);
  c.scale_by_inverse_layer_idx = io::optional_bool(f, j, "scale_attn_by_inverse_layer_idx").value_or(false);
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(true);
  if (io::optional_bool(f, j, "add_cross_attention").value_or(false))
    unsupported("{}: add_cross_attention (an encoder-decoder GPT-2) is not supported", file);
  // reorder_and_upcast_attn only changes the order of f32 operations: the same numbers in an f32 graph.
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

class Gpt2 final : public CausalLm {
 public:
  Gpt2(const io::Checkpoint& ckpt, Gpt2Config cfg) : ckpt_(ckpt), c_(std::move(cfg)) {
    prefix_ = ckpt.find("transformer.wte.weight") || !ckpt.find("wte.weight") ? "transformer." : "";
    s_ = summary_of(c_, ckpt.model_type(), c_.bigcode ? "GPTBigCodeForCausalLM" : "GPT2LMHeadModel");
    s_.features = {
        {"attention", fmt::format("{} heads, {} kv heads, head_dim {}", c_.num_heads, kv_heads(), c_.head_dim)},
        {"positions", fmt::format("learned absolute (n_positions {})", c_.max_positions)},
        {"activation", activation_name(c_.act)},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
  }

  const ModelSummary& summary() const override { return s_; }
  CacheGeometry cache() const override {
    return {c_.num_layers, kv_heads(), c_.head_dim, std::vector<int64_t>(size_t(c_.num_layers), 0)};
  }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    auto model_scope = b.scope("model");
    const int64_t H = c_.hidden_size;
    const std::string why = fmt::format("n_embd={}", H);
    ir::ValueId wte = bind_weight(b, ckpt_, prefix_ + "wte.weight", {c_.vocab_size, H}, "vocab_size, " + why);
    ir::ValueId wpe = bind_weight(b, ckpt_, prefix_ + "wpe.weight", {c_.max_positions, H}, "n_positions, " + why);
    ir::ValueId h = b.plus(b.add1("Embedding", {wte, in.input_ids}), b.add1("Embedding", {wpe, in.position_ids}));

    StepTables tables(b, in);
    CausalLmOutputs out;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("{}h.{}.", prefix_, i);
      for (const char* buffer : {"attn.bias", "attn.masked_bias"})  // causal-mask buffers of old checkpoints
        if (ckpt_.find(p + buffer)) ckpt_.mark_used(p + buffer);
      ir::ValueId x = norm(b, ckpt_, h, p + "ln_1", H, NormKind::Layer, c_.eps, true, "ln_1");
      AttentionOut a = attention(b, x, p, in, i, tables);
      out.present_key.push_back(a.present_key);
      out.present_value.push_back(a.present_value);
      h = b.plus(a.out, h);
      x = norm(b, ckpt_, h, p + "ln_2", H, NormKind::Layer, c_.eps, true, "ln_2");
      auto ms = b.scope("mlp");
      ir::ValueId m = activation(b, conv1d(b, x, p + "mlp.c_fc", H, c_.inner_size), c_.act);
      h = b.plus(h, conv1d(b, m, p + "mlp.c_proj", c_.inner_size, H));
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = norm(b, ckpt_, h, prefix_ + "ln_f", H, NormKind::Layer, c_.eps, true, "ln_f");
    out.logits = lm_head(b, ckpt_, h, wte, c_.tie_word_embeddings, c_.vocab_size, H);
    return out;
  }

 private:
  int64_t kv_heads() const { return c_.multi_query ? 1 : c_.num_heads; }

  // Conv1D: y = x @ W + b with W stored [in, out]; bound as its transpose so Linear sees [out, in].
  // GPT-BigCode's nn.Linear stores [out, in] already.
  ir::ValueId conv1d(ir::Builder& b, ir::ValueId x, const std::string& prefix, int64_t in, int64_t out) const {
    if (c_.bigcode) return linear(b, ckpt_, x, prefix, in, out, true, fmt::format("Linear [out={}, in={}]", out, in));
    const std::string why = fmt::format("Conv1D [in={}, out={}]", in, out);
    auto t = [](ir::WeightRef w) { return w.transposed({1, 0}); };
    ir::ValueId w = bind_weight(b, ckpt_, prefix + ".weight", {in, out}, why, t);
    return b.add1("Linear", {x, w, bind_weight(b, ckpt_, prefix + ".bias", {out}, why)});
  }

  AttentionOut attention(ir::Builder& b, ir::ValueId x, const std::string& p, const CausalLmInputs& in, int64_t layer,
                         StepTables& tables) const {
    auto s = b.scope("attn");
    const int64_t H = c_.hidden_size;
    const int64_t d = c_.head_dim, kv = kv_heads() * d;
    ir::ValueId qkv = conv1d(b, x, p + "attn.c_attn", H, H + 2 * kv);
    ir::ValueId q, k, v;
    if (c_.bigcode && !c_.multi_query) {
      const auto parts = split_qkv_per_head(b, qkv, c_.num_heads, d);
      q = parts[0], k = parts[1], v = parts[2];
    } else {
      q = split_heads(b, b.slice(qkv, 0, H, -1), c_.num_heads, d);
      k = split_heads(b, b.slice(qkv, H, H + kv, -1), kv_heads(), d);
      v = split_heads(b, b.slice(qkv, H + kv, H + 2 * kv, -1), kv_heads(), d);
    }
    double scale = c_.scale_attn_weights ? std::pow(double(c_.head_dim), -0.5) : 1.0;
    if (c_.scale_by_inverse_layer_idx) scale /= double(layer + 1);
    AttentionOut a = cached_attention(b, in, layer, q, k, v, tables.mask(0), scale);
    a.out = conv1d(b, a.out, p + "attn.c_proj", H, H);
    return a;
  }

  const io::Checkpoint& ckpt_;
  Gpt2Config c_;
  std::string prefix_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_gpt2(const io::Checkpoint& ckpt) {
  return std::make_unique<Gpt2>(ckpt, parse_gpt2_config(ckpt, false));
}

std::unique_ptr<CausalLm> make_gpt_bigcode(const io::Checkpoint& ckpt) {
  return std::make_unique<Gpt2>(ckpt, parse_gpt2_config(ckpt, true));
}

}  // namespace hfx::models
