// BERT-family encoders, reproducing Transformers' modeling_bert.py, modeling_roberta.py (XLM-RoBERTa is
// the same network) and modeling_distilbert.py in eval mode:
//   embeddings  BERT / RoBERTa: (word + token_type) + position -> LayerNorm; DistilBERT: word + position
//               -> LayerNorm (eps 1e-12, fixed in its code). Positions are 0..s-1, except RoBERTa's
//               create_position_ids_from_input_ids: padding_idx + cumsum(input_ids != pad) on real
//               tokens, padding_idx on pad tokens, computed in the graph from input_ids.
//               RoBERTa takes no token_type_ids input (as Optimum's export): Transformers then reads row
//               0 of token_type_embeddings for every token.
//   layers      post-norm: LayerNorm(attn_out + x), LayerNorm(ffn_out + that); q, k, v, output and FFN
//               projections all with bias; eager attention softmax(q k^T * d^-0.5 + mask) v with the
//               bidirectional padding mask (PaddingBias: 0 where attention_mask != 0, the lowest f32
//               elsewhere, as masking_utils' eager create_bidirectional_mask).
//   heads       sequence classification when the checkpoint has the head:
//               BERT:       logits = classifier(tanh(pooler.dense(h[:, 0])))
//               RoBERTa:    logits = classifier.out_proj(tanh(classifier.dense(h[:, 0])))
//               DistilBERT: logits = classifier(relu(pre_classifier(h[:, 0])))
//               Without a head, BertModel's pooler (pooler.dense.*) is not used: the task's outputs are
//               last_hidden_state only, and pipeline/export.cc ignores the pooler on purpose.
// Tensor names carry the base model's prefix ("bert.", "roberta.", "distilbert.") when saved from a
// *For... class and none when saved from the base model; it is read off the word-embedding tensor.
#include "models/bert.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/blocks.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

enum class Family { Bert, Roberta, DistilBert };

// ACT2FN names: the ones blocks.h implements, plus relu (DistilBERT's `activation` may be relu).
struct HiddenAct {
  bool relu = false;
  Activation act = Activation::Gelu;
};

HiddenAct parse_hidden_act(const io::JsonFile& f, const std::string& key, const std::string& value) {
  if (value == "relu") return {true, Activation::Gelu};
  return {false, parse_activation(f, key, value)};
}

ir::ValueId relu(ir::Builder& b, ir::ValueId x) {
  return b.add1("Where", {b.add1("Greater", {x, b.f32(0.0f)}), x, b.f32(0.0f)});
}

ir::ValueId apply(ir::Builder& b, ir::ValueId x, const HiddenAct& a) { return a.relu ? relu(b, x) : activation(b, x, a.act); }

struct EncoderConfig {
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0, head_dim = 0;
  int64_t max_positions = 0, type_vocab_size = 0;  // 0: no token types (DistilBERT)
  double eps = 1e-12;
  HiddenAct act;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

constexpr int64_t kMaxDim = int64_t(1) << 24;

EncoderConfig parse_config(const io::Checkpoint& ckpt, Family family) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  const std::string file = f.path.filename().string();
  EncoderConfig c;
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  c.max_positions = io::optional_int(f, j, "max_position_embeddings", 1, kMaxDim).value_or(512);
  if (family == Family::DistilBert) {
    // DistilBertConfig's own names; hidden_size & co. are attribute aliases a hand-written file may use.
    auto dim = [&](const char* name, const char* alias, std::optional<int64_t> dflt, int64_t max) {
      if (auto v = io::optional_int(f, j, name, 1, max)) return *v;
      if (auto v = io::optional_int(f, j, alias, 1, max)) return *v;
      if (dflt) return *dflt;
      return io::require_int(f, j, name, 1, max);
    };
    c.hidden_size = dim("dim", "hidden_size", 768, kMaxDim);
    c.num_layers = dim("n_layers", "num_hidden_layers", 6, 4096);
    c.num_heads = dim("n_heads", "num_attention_heads", 12, 4096);
    c.intermediate_size = dim("hidden_dim", "intermediate_size", 4 * 768, kMaxDim);
    c.act = parse_hidden_act(f, "activation", io::optional_string(f, j, "activation").value_or("gelu"));
    c.eps = 1e-12;  // nn.LayerNorm(config.dim, eps=1e-12) in modeling_distilbert.py
    c.pad_token_id = io::optional_int(f, j, "pad_token_id", 0).value_or(0);
  } else {
    c.hidden_size = io::require_int(f, j, "hidden_size", 1, kMaxDim);
    c.num_layers = io::require_int(f, j, "num_hidden_layers", 1, 4096);
    c.num_heads = io::require_int(f, j, "num_attention_heads", 1, 4096);
    c.intermediate_size = io::require_int(f, j, "intermediate_size", 1, kMaxDim);
    c.act = parse_hidden_act(f, "hidden_act", io::optional_string(f, j, "hidden_act").value_or("gelu"));
    c.type_vocab_size = io::optional_int(f, j, "type_vocab_size", 1, kMaxDim).value_or(2);
    c.eps = norm_eps(f, j, "layer_norm_eps", 1e-12);
    // BertConfig defaults pad_token_id to 0, RobertaConfig / XLMRobertaConfig to 1; null means none.
    const int64_t default_pad = family == Family::Roberta ? 1 : 0;
    if (!j.contains("pad_token_id")) c.pad_token_id = default_pad;
    else c.pad_token_id = io::optional_int(f, j, "pad_token_id", 0);
    if (io::optional_bool(f, j, "is_decoder").value_or(false))
      unsupported("{}: is_decoder (a causal BERT-family decoder) is not supported; hfx exports it as an encoder only", file);
    if (io::optional_bool(f, j, "add_cross_attention").value_or(false))
      unsupported("{}: add_cross_attention (an encoder-decoder BERT) is not supported", file);
    // Transformers 5 has only absolute position embeddings; older configs name the type.
    if (auto t = io::optional_string(f, j, "position_embedding_type"); t && *t != "absolute")
      unsupported("{}: position_embedding_type \"{}\" is not supported (only \"absolute\")", file, *t);
  }
  if (c.hidden_size % c.num_heads)
    bad_input("{}: the hidden size ({}) is not a multiple of the number of attention heads ({})", file, c.hidden_size,
              c.num_heads);
  c.head_dim = c.hidden_size / c.num_heads;
  if (family == Family::Roberta && !c.pad_token_id)
    bad_input("{}: pad_token_id is null, but RoBERTa's position ids count from padding_idx = pad_token_id", file);
  if (auto e = io::optional_int_list(f, j, "eos_token_id", 0)) c.eos_token_ids = *e;
  c.bos_token_id = io::optional_int(f, j, "bos_token_id", 0);
  return c;
}

const char* family_name(Family f) {
  switch (f) {
    case Family::Bert: return "Bert";
    case Family::Roberta: return "Roberta";
    case Family::DistilBert: return "DistilBert";
  }
  return "?";
}

class BertEncoder final : public Encoder {
 public:
  BertEncoder(const io::Checkpoint& ckpt, Family family, EncoderConfig cfg)
      : ckpt_(ckpt), family_(family), c_(std::move(cfg)) {
    prefix_ = detect_prefix();
    detect_head();
    const std::string base = ckpt.model_type() == "xlm-roberta" ? "XLMRoberta" : family_name(family_);
    s_ = summary_of(c_, ckpt.model_type(), base + (num_labels_ ? "ForSequenceClassification" : "Model"));
    s_.features = {
        {"attention", fmt::format("bidirectional, {} heads, head_dim {}", c_.num_heads, c_.head_dim)},
        {"positions", family_ == Family::Roberta
                          ? fmt::format("learned, counted from padding_idx + 1 = {} over real tokens (max_position_embeddings {})",
                                        *c_.pad_token_id + 1, c_.max_positions)
                          : fmt::format("learned absolute (max_position_embeddings {})", c_.max_positions)},
        {"token types", family_ == Family::DistilBert ? "none"
                        : uses_token_type_ids()       ? fmt::format("input (type_vocab_size {})", c_.type_vocab_size)
                                                      : "none (row 0 of token_type_embeddings)"},
        {"activation", c_.act.relu ? "relu" : activation_name(c_.act.act)},
        {"head", num_labels_ ? fmt::format("sequence classification, {} labels", num_labels_) : "none (feature extraction)"},
    };
  }

  const ModelSummary& summary() const override { return s_; }
  // BERT takes segments (Optimum's BERT export has token_type_ids); RoBERTa and DistilBERT do not.
  bool uses_token_type_ids() const override { return family_ == Family::Bert; }
  int64_t num_labels() const override { return num_labels_; }
  // RoBERTa's positions start at padding_idx + 1: a sequence of S real tokens reads row pad + S.
  int64_t max_sequence_length() const override {
    return family_ == Family::Roberta ? c_.max_positions - *c_.pad_token_id - 1 : c_.max_positions;
  }

  EncoderOutputs build(ir::Builder& b, const EncoderInputs& in) const override {
    auto model_scope = b.scope("model");
    // Buffers older Transformers versions saved with the weights: arange / zeros that Transformers
    // rebuilds itself (non-persistent since), ignored on load.
    for (const char* buffer : {"embeddings.position_ids", "embeddings.token_type_ids"})
      if (ckpt_.find(prefix_ + buffer)) ckpt_.mark_used(prefix_ + buffer);
    ir::ValueId h = embeddings(b, in);
    ir::ValueId bias;
    {
      auto s = b.scope("mask");
      bias = b.add1("PaddingBias", {in.attention_mask});
    }
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      auto layer_scope = b.scope(fmt::format("layers.{}", i));
      h = encoder_layer(b, h, bias, i, family_ == Family::DistilBert ? kDistilBertNames : kBertNames);
      b.graph().rename(h, fmt::format("/model/layers.{}/output", i));
    }
    EncoderOutputs out;
    // An Identity keeps the last layer's debug name (the task renames the output value).
    out.last_hidden_state = b.add1("Identity", {h});
    if (num_labels_) out.logits = head(b, h);
    return out;
  }

 private:
  // The base-model prefix: what precedes "embeddings.word_embeddings.weight".
  std::string detect_prefix() const {
    static const std::string suffix = "embeddings.word_embeddings.weight";
    std::vector<std::string> found;
    for (const auto& [name, t] : ckpt_.tensors())
      if (name.ends_with(suffix)) {
        std::string p = name.substr(0, name.size() - suffix.size());
        if (p.empty() || p.ends_with(".")) found.push_back(p);
      }
    if (found.empty()) bad_input("{}: no tensor named [<prefix>.]{} in the checkpoint", ckpt_.dir().string(), suffix);
    if (found.size() > 1)
      bad_input("{}: several word-embedding tensors ({}{}, {}{}): which one is the model?", ckpt_.dir().string(),
                found[0], suffix, found[1], suffix);
    return found[0];
  }

  // Sequence classification when the checkpoint has the head. Another head saved under the same
  // names (token classification, multiple choice) is refused by its architectures entry.
  void detect_head() {
    const char* out_name = family_ == Family::Roberta ? "classifier.out_proj.weight" : "classifier.weight";
    const char* hidden_name = family_ == Family::Roberta    ? "classifier.dense.weight"
                              : family_ == Family::DistilBert ? "pre_classifier.weight"
                                                            : nullptr;
    const io::TensorEntry* out = ckpt_.find(out_name);
    const bool has = out && (!hidden_name || ckpt_.find(hidden_name)) && !prefix_.empty();
    const io::JsonFile& f = ckpt_.config();
    const std::string file = f.path.filename().string();
    auto archs = io::optional_string_list(f, f.json, "architectures").value_or(std::vector<std::string>{});
    const bool says_seq = std::any_of(archs.begin(), archs.end(), [](const std::string& a) {
      return a.ends_with("ForSequenceClassification");
    });
    if (says_seq && !has)
      bad_input("{}: architectures names {} but the checkpoint has no {} (and {}) tensor", file, fmt::join(archs, ", "),
                out_name, hidden_name ? hidden_name : "pooler");
    if (!has) return;
    if (!archs.empty() && !says_seq)
      unsupported("{}: {} has a head hfx does not export (supported: the base model for feature extraction, "
                  "*ForSequenceClassification)",
                  file, fmt::join(archs, ", "));
    if (out->shape.size() != 2 || out->shape[1] != c_.hidden_size || out->shape[0] < 1)
      bad_input("tensor {} has shape [{}], expected [num_labels, {}] (hidden_size={})", out_name,
                fmt::join(out->shape, ", "), c_.hidden_size, c_.hidden_size);
    num_labels_ = out->shape[0];
    if (const auto* labels = io::optional_object(f, f.json, "id2label");
        labels && labels->is_object() && int64_t(labels->size()) != num_labels_)
      bad_input("{}: id2label has {} labels but {} has {} rows", file, labels->size(), out_name, num_labels_);
  }

  // LayerNorm `prefix` with weight/bias, or the gamma/beta names of old TF-converted checkpoints
  // (Transformers' legacy renaming).
  ir::ValueId layer_norm(ir::Builder& b, ir::ValueId x, const std::string& prefix, const std::string& scope) const {
    auto s = b.scope(scope);
    const int64_t n = c_.hidden_size;
    const bool legacy = !ckpt_.find(prefix + ".weight") && ckpt_.find(prefix + ".gamma");
    const std::string why = fmt::format("hidden_size={}", n);
    ir::ValueId w = bind_weight(b, ckpt_, prefix + (legacy ? ".gamma" : ".weight"), {n}, why);
    ir::ValueId bias = bind_weight(b, ckpt_, prefix + (legacy ? ".beta" : ".bias"), {n}, why);
    return b.add1("LayerNorm", {x, w, bias}, {{"epsilon", c_.eps}});
  }

  ir::ValueId dense(ir::Builder& b, ir::ValueId x, const std::string& prefix, int64_t in, int64_t out) const {
    return linear(b, ckpt_, x, prefix, in, out, true, fmt::format("hidden_size={}, intermediate_size={}",
                                                                  c_.hidden_size, c_.intermediate_size));
  }

  ir::ValueId embeddings(ir::Builder& b, const EncoderInputs& in) const {
    auto s = b.scope("embeddings");
    const int64_t H = c_.hidden_size;
    const std::string p = prefix_ + "embeddings.";
    const std::string why = fmt::format("hidden_size={}", H);
    ir::ValueId word = bind_weight(b, ckpt_, p + "word_embeddings.weight", {c_.vocab_size, H}, "vocab_size, " + why);
    ir::ValueId pos_table = bind_weight(b, ckpt_, p + "position_embeddings.weight", {c_.max_positions, H},
                                        "max_position_embeddings, " + why);
    ir::ValueId e = b.add1("Embedding", {word, in.input_ids});
    if (family_ != Family::DistilBert) {
      ir::ValueId types = bind_weight(b, ckpt_, p + "token_type_embeddings.weight", {c_.type_vocab_size, H},
                                      "type_vocab_size, " + why);
      // Without a token_type_ids input every token reads row 0 (Transformers' zero buffer).
      ir::ValueId t = in.token_type_ids != ir::kNone ? b.add1("Embedding", {types, in.token_type_ids})
                                                     : b.slice(types, 0, 1, 0);
      e = b.plus(e, t);
    }
    ir::ValueId positions;
    if (family_ == Family::Roberta) {
      // create_position_ids_from_input_ids: mask = ids != pad; (cumsum(mask) * mask) + pad
      ir::ValueId pad = b.i64(*c_.pad_token_id);
      ir::ValueId real = b.cast(b.add1("Not", {b.add1("Equal", {in.input_ids, pad})}), DType::I64);
      ir::ValueId count = b.add1("CumSum", {real, b.i64(1)});
      positions = b.plus(b.times(count, real), pad);  // [b, s]
    } else {
      ir::ValueId seq = b.squeeze(b.shape_of(in.input_ids, 1, 2), {0});
      positions = b.add1("Range", {b.i64(0), seq, b.i64(1)});  // [s], broadcast over the batch
    }
    e = b.plus(e, b.add1("Embedding", {pos_table, positions}));
    return layer_norm(b, e, p + "LayerNorm", "LayerNorm");
  }

  // Multi-head self-attention core: [b, s, H] projections in, [b, s, H] merged heads out.
  ir::ValueId attend(ir::Builder& b, ir::ValueId q, ir::ValueId k, ir::ValueId v, ir::ValueId bias) const {
    q = split_heads(b, q, c_.num_heads, c_.head_dim);
    k = split_heads(b, k, c_.num_heads, c_.head_dim);
    v = split_heads(b, v, c_.num_heads, c_.head_dim);
    const double scale = std::pow(double(c_.head_dim), -0.5);
    ir::ValueId o = b.add1("Attention", {q, k, v, bias}, {{"scale", scale}});
    o = b.transpose(o, {0, 2, 1, 3});  // [b, s, heads, head_dim]
    return b.reshape(o, {0, 0, c_.hidden_size});
  }

  // Checkpoint names of one encoder layer's weights: the same network under BERT's and DistilBERT's names.
  struct LayerNames {
    const char* layer;  // "encoder.layer" / "transformer.layer"
    const char *q, *k, *v, *attn_out, *attn_norm, *ffn_in, *ffn_out, *out_norm;
  };
  static constexpr LayerNames kBertNames{"encoder.layer", "attention.self.query", "attention.self.key",
                                         "attention.self.value", "attention.output.dense", "attention.output.LayerNorm",
                                         "intermediate.dense", "output.dense", "output.LayerNorm"};
  static constexpr LayerNames kDistilBertNames{"transformer.layer", "attention.q_lin", "attention.k_lin",
                                               "attention.v_lin", "attention.out_lin", "sa_layer_norm", "ffn.lin1",
                                               "ffn.lin2", "output_layer_norm"};

  // Post-norm layer: LayerNorm(x + attention(x)), then LayerNorm(h + mlp(h)). The norm's scope is the
  // last part of its checkpoint name ("LayerNorm", "sa_layer_norm", ...).
  ir::ValueId encoder_layer(ir::Builder& b, ir::ValueId x, ir::ValueId bias, int64_t i, const LayerNames& n) const {
    const int64_t H = c_.hidden_size, I = c_.intermediate_size;
    const std::string p = fmt::format("{}{}.{}.", prefix_, n.layer, i);
    auto scope_of = [](const std::string& name) { return name.substr(name.rfind('.') + 1); };
    ir::ValueId h;
    {
      auto s = b.scope("attention");
      ir::ValueId q = dense(b, x, p + n.q, H, H);
      ir::ValueId k = dense(b, x, p + n.k, H, H);
      ir::ValueId v = dense(b, x, p + n.v, H, H);
      ir::ValueId a = dense(b, attend(b, q, k, v, bias), p + n.attn_out, H, H);
      h = layer_norm(b, b.plus(a, x), p + n.attn_norm, scope_of(n.attn_norm));
    }
    auto s = b.scope("mlp");
    ir::ValueId m = apply(b, dense(b, h, p + n.ffn_in, H, I), c_.act);
    ir::ValueId o = dense(b, m, p + n.ffn_out, I, H);
    return layer_norm(b, b.plus(o, h), p + n.out_norm, scope_of(n.out_norm));
  }

  ir::ValueId head(ir::Builder& b, ir::ValueId h) const {
    auto s = b.scope("classifier");
    const int64_t H = c_.hidden_size;
    ir::ValueId first = b.add1("Gather", {h, b.i64(0)}, {{"axis", int64_t(1)}});  // h[:, 0] -> [b, H]
    switch (family_) {
      case Family::Bert: {
        ir::ValueId pooled = b.add1("Tanh", {dense(b, first, prefix_ + "pooler.dense", H, H)});
        return dense(b, pooled, "classifier", H, num_labels_);
      }
      case Family::Roberta: {
        ir::ValueId x = b.add1("Tanh", {dense(b, first, "classifier.dense", H, H)});
        return dense(b, x, "classifier.out_proj", H, num_labels_);
      }
      case Family::DistilBert: {
        ir::ValueId x = relu(b, dense(b, first, "pre_classifier", H, H));
        return dense(b, x, "classifier", H, num_labels_);
      }
    }
    HFX_CHECK(false, "unreachable");
  }

  const io::Checkpoint& ckpt_;
  Family family_;
  EncoderConfig c_;
  std::string prefix_;
  int64_t num_labels_ = 0;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<Encoder> make_bert(const io::Checkpoint& ckpt) {
  return std::make_unique<BertEncoder>(ckpt, Family::Bert, parse_config(ckpt, Family::Bert));
}

std::unique_ptr<Encoder> make_roberta(const io::Checkpoint& ckpt) {
  return std::make_unique<BertEncoder>(ckpt, Family::Roberta, parse_config(ckpt, Family::Roberta));
}

std::unique_ptr<Encoder> make_distilbert(const io::Checkpoint& ckpt) {
  return std::make_unique<BertEncoder>(ckpt, Family::DistilBert, parse_config(ckpt, Family::DistilBert));
}

}  // namespace hfx::models
