#include "models/blocks.h"

#include <fmt/format.h>

#include <cmath>
#include <mutex>
#include <set>

#include "core/error.h"
#include "models/weights.h"

namespace hfx::models {

Activation parse_activation(const io::JsonFile& f, const std::string& key, const std::string& value) {
  if (value == "silu" || value == "swish") return Activation::Silu;
  if (value == "gelu") return Activation::Gelu;
  if (value == "gelu_pytorch_tanh" || value == "gelu_new" || value == "gelu_fast") return Activation::GeluTanh;
  if (value == "relu") return Activation::Relu;
  if (value == "relu2") return Activation::Relu2;
  unsupported("{}: {} \"{}\" is not supported (supported: silu, swish, gelu, gelu_pytorch_tanh, gelu_new, gelu_fast, relu, "
              "relu2)",
              f.path.filename().string(), key, value);
}

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::Silu: return "silu";
    case Activation::Gelu: return "gelu";
    case Activation::GeluTanh: return "gelu (tanh approximation)";
    case Activation::Relu: return "relu";
    case Activation::Relu2: return "relu2 (squared relu)";
  }
  return "?";
}

ir::ValueId activation(ir::Builder& b, ir::ValueId x, Activation act) {
  switch (act) {
    case Activation::Silu: return b.times(x, b.add1("Sigmoid", {x}));
    case Activation::Gelu: return b.add1("Gelu", {x}, {{"approximate", std::string("none")}});
    case Activation::GeluTanh: return b.add1("Gelu", {x}, {{"approximate", std::string("tanh")}});
    case Activation::Relu: return b.add1("Where", {b.add1("Greater", {x, b.f32(0.0f)}), x, b.f32(0.0f)});
    case Activation::Relu2: {  // torch.square(relu(x))
      ir::ValueId r = activation(b, x, Activation::Relu);
      return b.times(r, r);
    }
  }
  HFX_CHECK(false, "unreachable");
}

ir::ValueId gated_activation(ir::Builder& b, ir::ValueId gate, ir::ValueId up, Activation act) {
  if (act == Activation::Silu) return b.add1("SwiGLU", {gate, up});
  return b.times(activation(b, gate, act), up);
}

ir::ValueId linear(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix, int64_t in,
                   int64_t out, bool bias, const std::string& why) {
  std::vector<ir::ValueId> inputs = {x, bind_weight(b, ckpt, prefix + ".weight", {out, in}, why)};
  if (bias) inputs.push_back(bind_weight(b, ckpt, prefix + ".bias", {out}, why));
  return b.add1("Linear", inputs);
}

ir::ValueId gated_mlp(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                      const GatedMlpNames& names, int64_t hidden, int64_t intermediate, bool bias, Activation act,
                      const std::string& why) {
  ir::ValueId gate = linear(b, ckpt, x, prefix + names.gate, hidden, intermediate, bias, why);
  ir::ValueId up = linear(b, ckpt, x, prefix + names.up, hidden, intermediate, bias, why);
  return linear(b, ckpt, gated_activation(b, gate, up, act), prefix + names.down, intermediate, hidden, bias, why);
}

double norm_eps(const io::JsonFile& f, const nlohmann::json& obj, std::string_view key, double fallback) {
  const double eps = io::optional_number(f, obj, key).value_or(fallback);
  if (!std::isfinite(eps) || eps < 0)
    bad_input("{}: {} is {}: a norm's epsilon must be a finite number >= 0 (it is added to the variance before the "
              "square root; typical values 1e-5 .. 1e-12)", f.path.filename().string(), key, eps);
  return eps;
}

ir::ValueId norm(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix, int64_t n,
                 NormKind kind, double eps, bool bias, const std::string& scope) {
  auto s = b.scope(scope);
  const std::string why = fmt::format("normalised size {}", n);
  // Gemma's RMSNorm and Nemotron's LayerNorm1P multiply by (1 + w), computed in f32 like the
  // (1.0 + weight.float()) they reproduce.
  const ir::ValueId w = kind == NormKind::RmsPlusOne || kind == NormKind::LayerPlusOne
                            ? bind_weight(b, ckpt, prefix + ".weight", {n}, why, [](ir::WeightRef r) { return r.plus_scalar(1.0); })
                            : bind_weight(b, ckpt, prefix + ".weight", {n}, why);
  if (kind == NormKind::Layer || kind == NormKind::LayerPlusOne) {
    std::vector<ir::ValueId> inputs = {x, w};
    if (bias) inputs.push_back(bind_weight(b, ckpt, prefix + ".bias", {n}, why));
    return b.add1("LayerNorm", inputs, {{"epsilon", eps}});
  }
  return b.add1("RMSNorm", {x, w}, {{"epsilon", eps}});
}

ir::ValueId split_heads(ir::Builder& b, ir::ValueId x, int64_t heads, int64_t head_dim) {
  return b.transpose(b.reshape(x, {0, 0, heads, head_dim}), {0, 2, 1, 3});
}

std::array<ir::ValueId, 3> split_qkv_per_head(ir::Builder& b, ir::ValueId qkv, int64_t heads, int64_t head_dim) {
  const int64_t d = head_dim;
  qkv = b.transpose(b.reshape(qkv, {0, 0, heads, 3 * d}), {0, 2, 1, 3});  // [b, heads, s, 3d]
  return {b.slice(qkv, 0, d, -1), b.slice(qkv, d, 2 * d, -1), b.slice(qkv, 2 * d, 3 * d, -1)};
}

const std::vector<ir::ValueId>& StepTables::rope(const RopeSpec& r, size_t key) {
  if (auto it = ropes_.find(key); it != ropes_.end()) return it->second;
  auto s = b_.scope(key ? fmt::format("rotary_emb_{}", key) : "rotary_emb");
  auto table = [&](const std::vector<float>& values, const std::string& name) {
    return b_.constant(Tensor::from_vector<float>(DType::F32, {int64_t(values.size())}, values), name);
  };
  ir::ValueId inv_freq = table(r.inv_freq, "rope_inv_freq");
  if (!r.long_inv_freq.empty()) {
    // longrope: the long factors once the longest position of the step reaches the original context
    // (Transformers' longrope_frequency_update: max(position_ids) + 1 > original_max_position_embeddings).
    ir::ValueId longest = b_.add1("ReduceMax", {b_.cast(in_.position_ids, DType::F32)}, {{"keepdims", int64_t(0)}});
    ir::ValueId is_long = b_.add1("Greater", {longest, b_.f32(float(r.original_max_position_embeddings - 1))});
    inv_freq = b_.add1("Where", {is_long, table(r.long_inv_freq, "rope_long_inv_freq"), inv_freq});
  }
  ir::Attrs attrs = {{"attention_scaling", r.attention_scaling}, {"rotary_dim", r.rotary_dim}};
  if (r.dynamic) {
    attrs["dynamic"] = int64_t(1);
    attrs["dynamic_base"] = r.theta;
    attrs["dynamic_factor"] = r.factor;
    attrs["dynamic_max_position"] = r.max_position_embeddings;
  }
  return ropes_[key] = b_.add("RopeCosSin", {in_.position_ids, inv_freq}, attrs);
}

ir::ValueId StepTables::mask(int64_t window) {
  if (auto it = masks_.find(window); it != masks_.end()) return it->second;
  auto s = b_.scope(window ? fmt::format("mask_sliding_{}", window) : "mask");
  std::vector<ir::ValueId> args = {in_.attention_mask, in_.input_ids};
  if (in_.cache_position != ir::kNone) args.push_back(in_.cache_position);
  return masks_[window] = b_.add1("AttentionBias", args, {{"sliding_window", window}});
}

ir::ValueId low_rank_adapter(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                             int64_t in, int64_t rank, int64_t out, const std::string& why) {
  auto s = b.scope("adapter");
  return linear(b, ckpt, linear(b, ckpt, x, prefix + ".0", in, rank, false, why), prefix + ".1", rank, out, false, why);
}

AttentionOut projected_attention(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId x, const std::string& prefix,
                                 const CausalLmInputs& in, int64_t layer, StepTables& tables, const ProjectedAttention& sp) {
  const std::string why = fmt::format("hidden_size={}, heads={}, kv_heads={}, head_dim={}", sp.hidden, sp.heads,
                                      sp.kv_heads, sp.head_dim);
  const int64_t in_width = sp.input ? sp.input : sp.hidden;
  auto heads = [&](const std::string& proj, int64_t n_heads, const std::string& adapter) {
    auto ps = b.scope(proj);
    ir::ValueId y = linear(b, ckpt, x, prefix + proj, in_width, n_heads * sp.head_dim, sp.bias, why);
    if (!adapter.empty())
      y = b.plus(y, low_rank_adapter(b, ckpt, x, adapter, in_width, sp.adapter_rank, n_heads * sp.head_dim, why));
    return split_heads(b, y, n_heads, sp.head_dim);
  };
  ir::ValueId q = heads("q_proj", sp.heads, sp.adapters[0]), k = heads("k_proj", sp.kv_heads, sp.adapters[1]),
              v = heads("v_proj", sp.kv_heads, sp.adapters[2]);
  if (sp.key_multiplier != 1.0) k = b.times(k, b.f32(float(sp.key_multiplier)));
  if (sp.rope) {
    const auto& cos_sin = tables.rope(*sp.rope);
    q = b.add1("RotaryEmbedding", {q, cos_sin[0], cos_sin[1]});
    k = b.add1("RotaryEmbedding", {k, cos_sin[0], cos_sin[1]});
  }
  AttentionOut r = cached_attention(b, in, layer, q, k, v, tables.mask(0), sp.scale);
  auto os = b.scope("o_proj");
  r.out = linear(b, ckpt, r.out, prefix + "o_proj", sp.heads * sp.head_dim, sp.hidden, sp.bias, why);
  return r;
}

AttentionOut cached_attention(ir::Builder& b, const CausalLmInputs& in, int64_t layer, ir::ValueId q, ir::ValueId k,
                              ir::ValueId v, ir::ValueId mask, double scale, double softcap) {
  // The cache: appended to (growing) or written in place (static); absent for a prefill graph.
  auto update = [&](const std::vector<ir::ValueId>& past, ir::ValueId cur) {
    if (past.empty()) return cur;
    ir::ValueId p = past[size_t(layer)];
    if (in.cache_position != ir::kNone) return b.add1("CacheUpdate", {p, cur, in.cache_position});
    return b.concat({p, cur}, 2);
  };
  AttentionOut r;
  r.present_key = update(in.past_key, k);
  r.present_value = update(in.past_value, v);
  const std::vector<ir::ValueId> args = {q, r.present_key, r.present_value, mask};
  ir::ValueId attn = softcap > 0 ? b.add1("SoftcapAttention", args, {{"scale", scale}, {"softcap", softcap}})
                                 : b.add1("Attention", args, {{"scale", scale}});
  const Shape qs = b.graph().value(q).shape;  // a copy: adding nodes below may reallocate the value table
  HFX_CHECK(qs[1].is_fixed() && qs[3].is_fixed(), "attention heads and head_dim must be fixed");
  ir::ValueId o = b.transpose(attn, {0, 2, 1, 3});  // [b, s, heads, head_dim]
  r.out = b.reshape(o, {0, 0, qs[1].value * qs[3].value});
  return r;
}

ir::ValueId lm_head(ir::Builder& b, const io::Checkpoint& ckpt, ir::ValueId h, ir::ValueId embed, bool tied,
                    int64_t vocab, int64_t hidden, const std::string& head_name, bool bias) {
  // Tied embeddings read the embedding matrix as lm_head; the checkpoint usually omits lm_head.weight.
  ir::ValueId head = tied ? embed
                          : bind_weight(b, ckpt, head_name, {vocab, hidden},
                                        fmt::format("vocab_size, hidden_size={}", hidden));
  if (tied && ckpt.find(head_name)) ckpt.mark_used(head_name);  // a saved copy of the tie
  std::vector<ir::ValueId> inputs = {h, head};
  if (bias)  // Phi: lm_head.bias [vocab]
    inputs.push_back(bind_weight(b, ckpt, head_name.substr(0, head_name.rfind('.')) + ".bias", {vocab}, "vocab_size"));
  auto s = b.scope("lm_head");
  return b.add1("Linear", inputs);
}

namespace {

// One warning per message and process: the config is parsed again by verify, inspect and the check.
void warn_once(const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(message).second) fmt::print(stderr, "hfx: warning: {}\n", message);
}

}  // namespace

HeadCounts parse_head_counts(const io::JsonFile& f, int64_t hidden_size) {
  const auto& j = f.json;
  HeadCounts h;
  h.heads = io::require_int(f, j, "num_attention_heads", 1, 4096);
  h.kv_heads = io::optional_int(f, j, "num_key_value_heads", 1, 4096).value_or(h.heads);
  const std::string file = f.path.filename().string();
  if (h.heads % h.kv_heads)
    bad_input("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", file, h.heads, h.kv_heads);
  if (hidden_size % h.heads)
    bad_input("{}: hidden_size ({}) is not a multiple of num_attention_heads ({})", file, hidden_size, h.heads);
  return h;
}

void read_generation_ids(const io::Checkpoint& ckpt, int64_t vocab_size, std::vector<int64_t>& eos,
                         std::optional<int64_t>& bos, std::optional<int64_t>& pad) {
  const io::JsonFile& f = ckpt.config();
  std::string eos_from, bos_from, pad_from;  // the file each id was read from, for the warning
  for (const io::JsonFile* src : {&f, ckpt.generation_config() ? &*ckpt.generation_config() : nullptr}) {
    if (!src) continue;
    const std::string name = src->path.filename().string();
    if (auto e = io::optional_int_list(*src, src->json, "eos_token_id", 0)) eos = *e, eos_from = name;
    if (auto b = io::optional_int(*src, src->json, "bos_token_id", 0)) bos = b, bos_from = name;
    if (auto p = io::optional_int(*src, src->json, "pad_token_id", 0)) pad = p, pad_from = name;
  }
  // Tiny test models often keep GPT-2's 50256 with a vocabulary of a few hundred: Transformers never
  // generates such an id, so ignoring it changes no output, while padding with it would fail.
  auto outside = [&](int64_t id, const char* field, const std::string& from) {
    if (id < vocab_size) return false;
    warn_once(fmt::format("{}: {} {} \u2265 vocab_size {}: ignored for generation", from, field, id, vocab_size));
    return true;
  };
  std::erase_if(eos, [&](int64_t id) { return outside(id, "eos_token_id", eos_from); });
  if (bos && outside(*bos, "bos_token_id", bos_from)) bos.reset();
  if (pad && outside(*pad, "pad_token_id", pad_from)) pad.reset();
}

}  // namespace hfx::models
