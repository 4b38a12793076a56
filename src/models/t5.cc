// T5 and mT5, reproducing Transformers' modeling_t5.py / modeling_mt5.py (T5ForConditionalGeneration)
// in eval mode:
//   norms       T5LayerNorm: x * rsqrt(mean(x^2) + eps) * w (an RMSNorm), pre-norm in every sub-layer,
//               a final norm after each stack
//   attention   no 1/sqrt(d) scaling; the scores add a relative position bias (the first layer's
//               `relative_attention_bias` table, shared by every layer of its stack), bidirectional in
//               the encoder, causal in the decoder; cross-attention adds no position bias
//   feed-forward wo(act(wi(x))) ("relu") or wo(act(wi_0(x)) * wi_1(x)) ("gated-gelu": gelu_new)
//   head        lm_head.weight when the checkpoint has it, else the shared embedding (Transformers 5 ties
//               them whatever the config says, and keeps a saved lm_head.weight that differs: every
//               untied T5 it saves is so); T5 scales the decoder's output by d_model^-0.5 first when the
//               config says scale_decoder_outputs (older configs: unless tie_word_embeddings is false);
//               mT5 never does. Each stack's embedding is likewise its own embed_tokens.weight when saved.
// Relative positions go through a bucket table computed here at export time for every distance up
// to max_distance + 1 (each further one lands in the last bucket), so the graph's work is a lookup and
// the f32 rounding of Transformers' logarithm is reproduced once, not by each runtime's Log.
#include "models/t5.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "models/blocks.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

constexpr int64_t kMaxDim = int64_t(1) << 24;

struct T5Config {
  int64_t vocab_size = 0, hidden_size = 0, d_kv = 0, d_ff = 0, num_layers = 0, decoder_layers = 0, num_heads = 0;
  int64_t num_buckets = 32, max_distance = 128;
  double eps = 1e-6;
  bool gated = false;
  Activation act = Activation::Relu;
  bool scale_output = true;
  int64_t decoder_start_token_id = 0;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

T5Config parse_config(const io::Checkpoint& ckpt, bool mt5) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  const std::string file = f.path.filename().string();
  T5Config c;
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  c.hidden_size = io::optional_int(f, j, "d_model", 1, kMaxDim).value_or(512);
  c.d_kv = io::optional_int(f, j, "d_kv", 1, kMaxDim).value_or(64);
  c.d_ff = io::optional_int(f, j, "d_ff", 1, kMaxDim).value_or(2048);
  c.num_layers = io::optional_int(f, j, "num_layers", 1, 4096).value_or(6);
  c.decoder_layers = io::optional_int(f, j, "num_decoder_layers", 1, 4096).value_or(c.num_layers);
  c.num_heads = io::optional_int(f, j, "num_heads", 1, 4096).value_or(8);
  c.num_buckets = io::optional_int(f, j, "relative_attention_num_buckets", 1, 1 << 16).value_or(32);
  c.max_distance = io::optional_int(f, j, "relative_attention_max_distance", 1, 1 << 20).value_or(128);
  // Bidirectional attention halves the buckets, and half of those are exact: below 4 the logarithmic
  // half is empty and Transformers divides by zero.
  if (c.num_buckets < 4)
    bad_input("{}: relative_attention_num_buckets {} is below 4 (the encoder's direction has {} / 2 buckets, half of "
              "them exact; none is left for longer distances)",
              file, c.num_buckets, c.num_buckets);
  if (c.max_distance <= c.num_buckets / 2)
    bad_input("{}: relative_attention_max_distance {} must be above the exact buckets ({}): the logarithmic buckets "
              "span the distances between them",
              file, c.max_distance, c.num_buckets / 2);
  c.eps = norm_eps(f, j, "layer_norm_epsilon", 1e-6);
  const std::string proj = io::optional_string(f, j, "feed_forward_proj").value_or(mt5 ? "gated-gelu" : "relu");
  // "gated-ACT" or "ACT" (T5Config.__post_init__); gated-gelu runs gelu_new, for backward compatibility.
  std::string act = proj;
  if (proj.starts_with("gated-")) {
    c.gated = true;
    act = proj.substr(6);
  }
  if (act.find('-') != std::string::npos)
    bad_input("{}: feed_forward_proj \"{}\" is not `gated-ACT` or `ACT`", file, proj);
  if (proj == "gated-gelu") act = "gelu_new";
  c.act = act == "relu" ? Activation::Relu : parse_activation(f, "feed_forward_proj", act);
  const auto tie = io::optional_bool(f, j, "tie_word_embeddings");
  if (mt5) c.scale_output = false;  // MT5ForConditionalGeneration never scales (Transformers 5)
  else c.scale_output = io::optional_bool(f, j, "scale_decoder_outputs").value_or(tie != false);
  c.pad_token_id = io::optional_int(f, j, "pad_token_id", 0).value_or(0);
  c.decoder_start_token_id = io::optional_int(f, j, "decoder_start_token_id", 0).value_or(*c.pad_token_id);
  c.bos_token_id = io::optional_int(f, j, "bos_token_id", 0);
  if (auto e = io::optional_int_list(f, j, "eos_token_id", 0)) c.eos_token_ids = *e;
  else if (!j.contains("eos_token_id")) c.eos_token_ids = {1};
  if (c.decoder_start_token_id >= c.vocab_size)
    bad_input("{}: decoder_start_token_id {} is not below vocab_size {}", file, c.decoder_start_token_id, c.vocab_size);
  return c;
}

class T5 final : public Seq2SeqLm {
 public:
  T5(const io::Checkpoint& ckpt, bool mt5) : ckpt_(ckpt), c_(parse_config(ckpt, mt5)) {
    // The embedding, saved under one of the names Transformers ties together.
    if (!ckpt_.find("shared.weight") && !ckpt_.find("encoder.embed_tokens.weight") && !ckpt_.find("decoder.embed_tokens.weight"))
      bad_input("{}: no tensor shared.weight (the T5 embedding) in the checkpoint", ckpt_.dir().string());
    // T5ForConditionalGeneration's own `shared` is read by neither stack's forward when each saved its
    // embed_tokens: a copy of the tie then.
    if (ckpt_.find("shared.weight") && ckpt_.find("encoder.embed_tokens.weight") && ckpt_.find("decoder.embed_tokens.weight") &&
        ckpt_.find("lm_head.weight"))
      ckpt_.mark_used("shared.weight");
    s_.model_type = ckpt.model_type();
    s_.hf_class = mt5 ? "MT5ForConditionalGeneration" : "T5ForConditionalGeneration";
    s_.vocab_size = c_.vocab_size;
    s_.hidden_size = c_.hidden_size;
    s_.num_layers = c_.decoder_layers;
    s_.num_heads = c_.num_heads;
    s_.eos_token_ids = c_.eos_token_ids;
    s_.bos_token_id = c_.bos_token_id;
    s_.pad_token_id = c_.pad_token_id;
    s_.features = {
        {"layers", fmt::format("encoder {}, decoder {}", c_.num_layers, c_.decoder_layers)},
        {"attention", fmt::format("{} heads x d_kv {}, unscaled, relative position buckets {} (max distance {})",
                                  c_.num_heads, c_.d_kv, c_.num_buckets, c_.max_distance)},
        {"feed-forward", fmt::format("{}{}", c_.gated ? "gated " : "", activation_name(c_.act))},
        {"head", fmt::format("{}{}", ckpt_.find("lm_head.weight") ? "lm_head" : "tied to the shared embedding",
                             c_.scale_output ? ", decoder output scaled by d_model^-0.5" : "")},
        {"decoder start", fmt::format("token {}", c_.decoder_start_token_id)},
    };
  }

  const ModelSummary& summary() const override { return s_; }
  int64_t decoder_start_token_id() const override { return c_.decoder_start_token_id; }
  int64_t decoder_layers() const override { return c_.decoder_layers; }
  int64_t heads() const override { return c_.num_heads; }
  int64_t head_dim() const override { return c_.d_kv; }

  ir::ValueId encode(ir::Builder& b, const EncoderInputs& in) const override {
    auto stack = b.scope("encoder");
    ir::ValueId h = embed(b, "encoder", in.input_ids);
    ir::ValueId bias;
    {
      auto s = b.scope("position_bias");
      ir::ValueId length = b.squeeze(b.shape_of(in.input_ids, 1, 2), {0});
      ir::ValueId positions = b.add1("Range", {b.i64(0), length, b.i64(1)});
      ir::ValueId pb = position_bias(b, "encoder", positions, positions, true);
      bias = b.plus(pb, b.add1("PaddingBias", {in.attention_mask}));  // [b, heads, s, s]
    }
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("encoder.block.{}.layer.", i);
      ir::ValueId x = t5_norm(b, h, p + "0.layer_norm", "attn_norm");
      ir::ValueId q = project(b, x, p + "0.SelfAttention.q");
      ir::ValueId k = project(b, x, p + "0.SelfAttention.k");
      ir::ValueId v = project(b, x, p + "0.SelfAttention.v");
      h = b.plus(h, attend(b, q, k, v, bias, p + "0.SelfAttention.o"));
      h = b.plus(h, feed_forward(b, t5_norm(b, h, p + "1.layer_norm", "ffn_norm"), p + "1.DenseReluDense"));
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));  // as verify localises a divergence
    }
    return t5_norm(b, h, "encoder.final_layer_norm", "final_norm");
  }

  Seq2SeqDecoderOutputs decode(ir::Builder& b, const Seq2SeqDecoderInputs& in) const override {
    auto stack = b.scope("decoder");
    // Transformers ignores this on load: the cross-attention never has a position bias.
    if (const char* n = "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"; ckpt_.find(n))
      ckpt_.mark_used(n);
    Seq2SeqDecoderOutputs out;
    ir::ValueId h = embed(b, "decoder", in.input_ids);
    ir::ValueId self_bias, cross_bias;
    {
      auto s = b.scope("position_bias");
      const StepPositions pos = step_positions(b, in);
      // The causal mask folded into the bias.
      self_bias = causal_bias(b, pos, position_bias(b, "decoder", pos.queries, pos.keys, false));
    }
    {
      auto s = b.scope("cross_mask");
      cross_bias = b.add1("PaddingBias", {in.encoder_attention_mask});  // [b, 1, 1, enc]
    }
    const bool first = in.encoder_hidden_states != ir::kNone;
    for (int64_t i = 0; i < c_.decoder_layers; ++i) {
      auto layer = b.scope(fmt::format("layers.{}", i));
      const std::string p = fmt::format("decoder.block.{}.layer.", i);
      {
        auto s = b.scope("self_attn");
        ir::ValueId x = t5_norm(b, h, p + "0.layer_norm", "norm");
        ir::ValueId q = project(b, x, p + "0.SelfAttention.q");
        ir::ValueId k = project(b, x, p + "0.SelfAttention.k");
        ir::ValueId v = project(b, x, p + "0.SelfAttention.v");
        k = update_self_cache(b, in, in.past_key, i, k);
        v = update_self_cache(b, in, in.past_value, i, v);
        out.present_key.push_back(k);
        out.present_value.push_back(v);
        h = b.plus(h, attend(b, q, k, v, self_bias, p + "0.SelfAttention.o"));
      }
      {
        auto s = b.scope("cross_attn");
        ir::ValueId x = t5_norm(b, h, p + "1.layer_norm", "norm");
        ir::ValueId q = project(b, x, p + "1.EncDecAttention.q");
        ir::ValueId k, v;
        if (first) {
          k = project(b, in.encoder_hidden_states, p + "1.EncDecAttention.k");
          v = project(b, in.encoder_hidden_states, p + "1.EncDecAttention.v");
          if (!in.cross_key.empty()) {  // the merged decoder: the carried state once there is one
            k = kept_or_computed(b, in.cross_key[size_t(i)], k);
            v = kept_or_computed(b, in.cross_value[size_t(i)], v);
          }
          out.cross_key.push_back(k);
          out.cross_value.push_back(v);
        } else {
          // The carried keys/values stand for these projections: bound all the same, so weight
          // accounting holds for a graph that does not read them.
          for (const char* w : {"k", "v"}) ckpt_.mark_used(p + "1.EncDecAttention." + w + ".weight");
          k = in.cross_key[size_t(i)];
          v = in.cross_value[size_t(i)];
        }
        h = b.plus(h, attend(b, q, k, v, cross_bias, p + "1.EncDecAttention.o"));
      }
      h = b.plus(h, feed_forward(b, t5_norm(b, h, p + "2.layer_norm", "ffn_norm"), p + "2.DenseReluDense"));
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    h = t5_norm(b, h, "decoder.final_layer_norm", "final_norm");
    if (c_.scale_output) h = b.times(h, b.f32(float(std::pow(double(c_.hidden_size), -0.5))));
    const bool own_head = ckpt_.find("lm_head.weight") != nullptr;
    out.logits = lm_head(b, ckpt_, h, own_head ? ir::kNone : embedding_table(b, "lm_head"), !own_head, c_.vocab_size,
                         c_.hidden_size);
    return out;
  }

 private:
  std::string why() const {
    return fmt::format("d_model={}, num_heads={}, d_kv={}, d_ff={}", c_.hidden_size, c_.num_heads, c_.d_kv, c_.d_ff);
  }

  // The table `user` ("encoder", "decoder": its stack's own embed_tokens.weight first; "lm_head") reads:
  // what the checkpoint saved for it, else the shared embedding under the first name it was saved by.
  ir::ValueId embedding_table(ir::Builder& b, const std::string& user) const {
    std::vector<std::string> names = {user + ".embed_tokens.weight", "shared.weight", "encoder.embed_tokens.weight",
                                      "decoder.embed_tokens.weight"};
    if (user == "lm_head") names.erase(names.begin());
    for (const auto& name : names)
      if (ckpt_.find(name)) return bind_weight(b, ckpt_, name, {c_.vocab_size, c_.hidden_size}, "vocab_size, " + why());
    HFX_CHECK(false, "no T5 embedding (checked when the model was made)");
  }

  ir::ValueId embed(ir::Builder& b, const std::string& stack, ir::ValueId ids) const {
    auto s = b.scope("embed_tokens");
    return b.add1("Embedding", {embedding_table(b, stack), ids});
  }

  ir::ValueId t5_norm(ir::Builder& b, ir::ValueId x, const std::string& prefix, const std::string& scope) const {
    return norm(b, ckpt_, x, prefix, c_.hidden_size, NormKind::Rms, c_.eps, false, scope);
  }

  // [b, s, d_model] -> [b, heads, s, d_kv]
  ir::ValueId project(ir::Builder& b, ir::ValueId x, const std::string& prefix) const {
    return split_heads(b, linear(b, ckpt_, x, prefix, c_.hidden_size, c_.num_heads * c_.d_kv, false, why()), c_.num_heads,
                       c_.d_kv);
  }

  // softmax(q k^T + bias) v, heads merged, then the output projection `o`.
  ir::ValueId attend(ir::Builder& b, ir::ValueId q, ir::ValueId k, ir::ValueId v, ir::ValueId bias,
                     const std::string& o) const {
    ir::ValueId a = b.add1("Attention", {q, k, v, bias}, {{"scale", 1.0}});
    a = b.reshape(b.transpose(a, {0, 2, 1, 3}), {0, 0, c_.num_heads * c_.d_kv});
    return linear(b, ckpt_, a, o, c_.num_heads * c_.d_kv, c_.hidden_size, false, why());
  }

  ir::ValueId feed_forward(ir::Builder& b, ir::ValueId x, const std::string& prefix) const {
    auto s = b.scope("mlp");
    if (c_.gated)
      return gated_mlp(b, ckpt_, x, prefix + ".", {"wi_0", "wi_1", "wo"}, c_.hidden_size, c_.d_ff, false, c_.act, why());
    ir::ValueId up = linear(b, ckpt_, x, prefix + ".wi", c_.hidden_size, c_.d_ff, false, why());
    return linear(b, ckpt_, activation(b, up, c_.act), prefix + ".wo", c_.d_ff, c_.hidden_size, false, why());
  }


  // The relative position bias [1, heads, queries, keys] of stack `stack` ("encoder", "decoder").
  ir::ValueId position_bias(ir::Builder& b, const std::string& stack, ir::ValueId queries, ir::ValueId keys,
                            bool bidirectional) const {
    const int64_t buckets = bidirectional ? c_.num_buckets / 2 : c_.num_buckets;
    ir::ValueId rel = relative_positions(b, {queries, keys});
    ir::ValueId zero = b.i64(0);
    ir::ValueId later = b.add1("Greater", {rel, zero});
    // Distance in the direction that has buckets: |rel| (bidirectional), else how far back (0 ahead).
    ir::ValueId back = b.add1("Neg", {rel});
    ir::ValueId distance = b.add1("Where", {later, bidirectional ? rel : zero, back});
    // Every distance past max_distance + 1 has the last bucket: the table stops there.
    const int64_t cap = c_.max_distance + 1;
    ir::ValueId capped = b.add1("Where", {b.add1("Greater", {distance, b.i64(cap)}), b.i64(cap), distance});
    std::vector<int64_t> table;
    for (int64_t d = 0; d <= cap; ++d) table.push_back(t5_distance_bucket(d, buckets, c_.max_distance));
    ir::ValueId bucket = b.add1("Gather", {b.i64s(table), capped}, {{"axis", int64_t(0)}});
    if (bidirectional)  // keys after the query use the upper half
      bucket = b.plus(bucket, b.times(b.cast(later, DType::I64), b.i64(buckets)));
    const std::string name = stack + ".block.0.layer.0.SelfAttention.relative_attention_bias.weight";
    ir::ValueId weights = bind_weight(b, ckpt_, name, {c_.num_buckets, c_.num_heads},
                                      fmt::format("relative_attention_num_buckets={}, num_heads={}", c_.num_buckets, c_.num_heads));
    ir::ValueId values = b.add1("Gather", {weights, bucket}, {{"axis", int64_t(0)}});  // [q, k, heads]
    return b.unsqueeze(b.transpose(values, {2, 0, 1}), {0});
  }

  const io::Checkpoint& ckpt_;
  T5Config c_;
  ModelSummary s_;
};

}  // namespace

int64_t t5_distance_bucket(int64_t distance, int64_t num_buckets, int64_t max_distance) {
  const int64_t max_exact = num_buckets / 2;
  if (distance < max_exact) return distance;
  // max_exact + (log(distance.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets -
  // max_exact)).to(long): each step in f32, the divisor a double logarithm rounded to f32, as torch runs it.
  const float ratio = float(distance) / float(max_exact);
  const float scaled = std::log(ratio) / float(std::log(double(max_distance) / double(max_exact))) * float(num_buckets - max_exact);
  return std::min(max_exact + int64_t(scaled), num_buckets - 1);
}

std::unique_ptr<Seq2SeqLm> make_t5(const io::Checkpoint& ckpt) { return std::make_unique<T5>(ckpt, false); }
std::unique_ptr<Seq2SeqLm> make_mt5(const io::Checkpoint& ckpt) { return std::make_unique<T5>(ckpt, true); }

}  // namespace hfx::models
