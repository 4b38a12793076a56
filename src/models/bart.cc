// BART, mBART, Marian and Whisper, reproducing Transformers' modeling_bart.py, modeling_mbart.py,
// modeling_marian.py and modeling_whisper.py (BartForConditionalGeneration, MBartForConditionalGeneration,
// MarianMTModel, WhisperForConditionalGeneration) in eval mode. One network; the families differ by
// their traits:
//   embeddings  the token embedding times sqrt(d_model) when scale_embedding, plus a position table:
//               learned with an offset of 2 (BartLearnedPositionalEmbedding: max_position_embeddings + 2
//               rows, position p reads row p + 2; BART, mBART) or sinusoidal (Marian: max_position_embeddings
//               rows, sin in the first half of each row and cos in the second, computed here in double
//               and rounded to f32 as create_weight does, unless the checkpoint saved the table, which
//               Transformers then loads); then layernorm_embedding (BART, mBART; not Marian)
//   speech      Whisper's encoder reads log-mel features [batch, num_mel_bins, 2 * max_source_positions]
//               (the one length its encoder accepts) through conv1 (kernel 3, padding 1), gelu, conv2
//               (kernel 3, stride 2, padding 1), gelu, each lowered as one MatMul over the 3 taps side by
//               side (im2col); then its saved sinusoidal positions, no mask anywhere (its decoder reads no
//               encoder_attention_mask either), key projections without bias, positions without offset
//               in the decoder, pre-norm, and proj_out tied to the decoder's embedding. Transformers
//               defines but never applies Whisper's embed_scale: scale_embedding is ignored as it does.
//   layers      LayerNorm (eps 1e-5, nn.LayerNorm's) around self-attention, cross-attention (decoder) and
//               fc1/act/fc2: post-norm, norm(x + f(x)) (BART, Marian), or pre-norm, x + f(norm(x)), with a
//               final layer_norm after each stack (mBART)
//   attention   q/k/v/out projections with biases, scores scaled by head_dim^-0.5; bidirectional with the
//               source's padding in the encoder, causal in the decoder, the source's padding across
//   head        lm_head.weight when the checkpoint has it, else the shared embedding (Transformers 5 keeps
//               a saved head that differs from the embedding whatever the config says, and ties it
//               otherwise); plus final_logits_bias [1, vocab] when saved (a zero buffer otherwise). Each
//               stack's embedding is likewise its own embed_tokens.weight when saved. Marian with
//               share_encoder_decoder_embeddings false has no shared embedding: the encoder reads its own,
//               the decoder and the head read the decoder's (decoder_vocab_size rows).
// Decoder positions start at the past length, read from the first past key's shape. Keys of
// fairseq-era configs that Transformers ignores (normalize_before, add_final_layer_norm, ...) are
// refused when they describe another network than the one Transformers runs for the model_type.
#include "models/bart.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "models/blocks.h"
#include "models/weights.h"

namespace hfx::models {

namespace {

constexpr int64_t kMaxDim = int64_t(1) << 24;
// The sinusoidal table is built in memory at export time: 1 GiB of f32 at most.
constexpr int64_t kMaxTableElements = int64_t(1) << 28;
// nn.LayerNorm's default: none of the three configs sets it.
constexpr double kLayerNormEps = 1e-5;

enum class Positions { Learned, Sinusoidal };
enum class Source { Tokens, Mel };

// What tells the families apart (the rest of the network is one).
struct BartTraits {
  std::string model_type, hf_class;
  bool pre_norm = false;            // mBART: a norm before each sub-layer, a final layer_norm per stack
  bool layernorm_embedding = true;  // BART, mBART: a LayerNorm after the embeddings
  Positions positions = Positions::Learned;
  int64_t position_offset = 2;      // BartLearnedPositionalEmbedding's offset (Whisper's: none)
  bool marian = false;              // share_encoder_decoder_embeddings, decoder_vocab_size
  Source source = Source::Tokens;   // Whisper: log-mel features through a convolutional stem
  bool key_bias = true;             // Whisper's k_proj has none
  std::string head = "lm_head";     // the untied head's name (Whisper's proj_out)
  // The config class's defaults for the geometry config.json may omit (BART's, mBART's and Marian's
  // are the same; WhisperConfig's are whisper-tiny's).
  struct Geometry {
    int64_t d_model = 1024, layers = 12, heads = 16, ffn = 4096;
  } defaults;
  // The config class's defaults for keys config.json may omit.
  int64_t default_pad = 1;
  std::optional<int64_t> default_bos = 0;
  int64_t default_eos = 2;
  // decoder_start_token_id when config.json has none: BartConfig's 2; MarianConfig's is its default
  // pad_token_id (58100, the pad of its default vocabulary); mBART has none (generate() then starts
  // from bos_token_id).
  enum class Start { Fixed, Pad, Bos } default_start = Start::Fixed;
  int64_t default_start_id = 2;
  // Keys of fairseq-era configs that Transformers 5 ignores, with the value that describes the network
  // its class runs for this model_type.
  std::vector<std::pair<const char*, bool>> legacy_flags;
};

const BartTraits kBart = {
    .model_type = "bart",
    .hf_class = "BartForConditionalGeneration",
    .legacy_flags = {{"normalize_before", false}, {"add_final_layer_norm", false}, {"normalize_embedding", true},
                     {"static_position_embeddings", false}, {"add_bias_logits", false}},
};
const BartTraits kMBart = {
    .model_type = "mbart",
    .hf_class = "MBartForConditionalGeneration",
    .pre_norm = true,
    .default_start = BartTraits::Start::Bos,
    .legacy_flags = {{"normalize_before", true}, {"add_final_layer_norm", true}, {"normalize_embedding", true},
                     {"static_position_embeddings", false}, {"add_bias_logits", false}},
};
const BartTraits kMarian = {
    .model_type = "marian",
    .hf_class = "MarianMTModel",
    .layernorm_embedding = false,
    .positions = Positions::Sinusoidal,
    .marian = true,
    .default_pad = 58100,
    .default_bos = std::nullopt,
    .default_eos = 0,
    .default_start = BartTraits::Start::Pad,
    .legacy_flags = {{"normalize_before", false}, {"add_final_layer_norm", false}, {"normalize_embedding", false},
                     {"static_position_embeddings", true}, {"add_bias_logits", false}},
};
const BartTraits kWhisper = {
    .model_type = "whisper",
    .hf_class = "WhisperForConditionalGeneration",
    .pre_norm = true,
    .layernorm_embedding = false,
    .position_offset = 0,
    .source = Source::Mel,
    .key_bias = false,
    .head = "proj_out",
    .defaults = {.d_model = 384, .layers = 4, .heads = 6, .ffn = 1536},
    .default_pad = 50256,
    .default_bos = 50256,
    .default_eos = 50256,
    .default_start_id = 50257,
};

struct BartConfig {
  int64_t vocab_size = 0;          // the encoder's (and, shared, the decoder's)
  int64_t target_vocab_size = 0;   // the decoder's and the logits'
  int64_t d_model = 0, encoder_layers = 0, decoder_layers = 0, encoder_heads = 0, decoder_heads = 0,
          encoder_ffn = 0, decoder_ffn = 0, max_positions = 0;
  // Whisper's: its tables' rows (encoder, decoder) and the features' mel bins.
  int64_t source_positions = 0, target_positions = 0, mel_bins = 0;
  bool scale_embedding = false;
  bool shared = true;  // one embedding for both stacks (Marian's share_encoder_decoder_embeddings)
  Activation act = Activation::Gelu;
  std::string act_name;
  int64_t decoder_start_token_id = 0;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

BartConfig parse_config(const io::Checkpoint& ckpt, const BartTraits& t) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  const std::string file = f.path.filename().string();
  for (const auto& [key, runs] : t.legacy_flags)
    if (auto v = io::optional_bool(f, j, key); v && *v != runs)
      unsupported("{}: {} {} is not supported for model_type {} ({} runs as {} {}; Transformers ignores the key)", file,
                  key, *v, t.model_type, t.hf_class, key, runs);
  if (!t.marian && t.source == Source::Tokens)
    if (auto extra = io::optional_int(f, j, "extra_pos_embeddings", 0); extra && *extra != 2)
      unsupported("{}: extra_pos_embeddings {} is not supported ({} offsets its learned positions by 2; Transformers "
                  "ignores the key)",
                  file, *extra, t.hf_class);
  BartConfig c;
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  const BartTraits::Geometry& d = t.defaults;
  c.d_model = io::optional_int(f, j, "d_model", 1, kMaxDim).value_or(d.d_model);
  c.encoder_layers = io::optional_int(f, j, "encoder_layers", 1, 4096).value_or(d.layers);
  c.decoder_layers = io::optional_int(f, j, "decoder_layers", 1, 4096).value_or(d.layers);
  c.encoder_heads = io::optional_int(f, j, "encoder_attention_heads", 1, 4096).value_or(d.heads);
  c.decoder_heads = io::optional_int(f, j, "decoder_attention_heads", 1, 4096).value_or(d.heads);
  c.encoder_ffn = io::optional_int(f, j, "encoder_ffn_dim", 1, kMaxDim).value_or(d.ffn);
  c.decoder_ffn = io::optional_int(f, j, "decoder_ffn_dim", 1, kMaxDim).value_or(d.ffn);
  if (t.source == Source::Mel) {
    c.mel_bins = io::optional_int(f, j, "num_mel_bins", 1, 4096).value_or(80);
    c.source_positions = io::optional_int(f, j, "max_source_positions", 1, 1 << 20).value_or(1500);
    c.target_positions = io::optional_int(f, j, "max_target_positions", 1, 1 << 20).value_or(448);
  }
  c.max_positions = io::optional_int(f, j, "max_position_embeddings", 1, 1 << 24).value_or(1024);
  for (const auto& [key, heads] : {std::pair{"encoder_attention_heads", c.encoder_heads},
                                   std::pair{"decoder_attention_heads", c.decoder_heads}})
    if (c.d_model % heads != 0)
      bad_input("{}: d_model {} is not a multiple of {} {} (each head is d_model / heads wide)", file, c.d_model, key,
                heads);
  c.scale_embedding = t.source == Source::Tokens && io::optional_bool(f, j, "scale_embedding").value_or(false);
  c.act_name = io::optional_string(f, j, "activation_function").value_or("gelu");
  c.act = parse_activation(f, "activation_function", c.act_name);
  c.target_vocab_size = c.vocab_size;
  if (t.marian) {
    c.shared = io::optional_bool(f, j, "share_encoder_decoder_embeddings").value_or(true);
    if (!c.shared)
      c.target_vocab_size = io::optional_int(f, j, "decoder_vocab_size", 1, int64_t(1) << 26).value_or(c.vocab_size);
  }
  if (t.positions == Positions::Sinusoidal && c.max_positions * c.d_model > kMaxTableElements)
    bad_input("{}: max_position_embeddings {} x d_model {} is too large a sinusoidal position table (at most {} "
              "elements)",
              file, c.max_positions, c.d_model, kMaxTableElements);

  c.pad_token_id = io::optional_int(f, j, "pad_token_id", 0).value_or(t.default_pad);
  c.bos_token_id = j.contains("bos_token_id") ? io::optional_int(f, j, "bos_token_id", 0) : t.default_bos;
  c.eos_token_ids = {t.default_eos};
  const std::optional<int64_t> config_pad = c.pad_token_id;
  read_generation_ids(ckpt, c.target_vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  // generate() reads generation_config.json's decoder_start_token_id first, then bos_token_id.
  std::optional<int64_t> start = io::optional_int(f, j, "decoder_start_token_id", 0);
  std::string start_from = file;
  if (const auto& g = ckpt.generation_config())
    if (auto s = io::optional_int(*g, g->json, "decoder_start_token_id", 0))
      start = s, start_from = g->path.filename().string();
  if (!start && !j.contains("decoder_start_token_id")) {
    if (t.default_start == BartTraits::Start::Fixed) start = t.default_start_id;
    else if (t.default_start == BartTraits::Start::Pad) start = config_pad;
  }
  if (!start) start = c.bos_token_id;
  if (!start)
    bad_input("{}: no decoder_start_token_id and no bos_token_id: the token a decoded sequence starts from", file);
  if (*start >= c.target_vocab_size)
    bad_input("{}: decoder_start_token_id {} is not below the decoder's vocabulary ({})", start_from, *start,
              c.target_vocab_size);
  c.decoder_start_token_id = *start;
  return c;
}

// MarianSinusoidalPositionalEmbedding.create_weight: row p, column i < ceil(d / 2): sin(p / 10000^(2i / d)),
// column ceil(d / 2) + i: cos(p / 10000^(2i / d)); computed in double, stored as f32.
Tensor sinusoidal_table(int64_t positions, int64_t d) {
  std::vector<float> v(size_t(positions * d));
  const int64_t half = (d + 1) / 2;
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t col = 0; col < d; ++col) {
      const int64_t i = col / 2;
      const double angle = double(p) / std::pow(10000.0, double(2 * i) / double(d));
      if (col % 2 == 0) v[size_t(p * d + i)] = float(std::sin(angle));
      else v[size_t(p * d + half + i)] = float(std::cos(angle));
    }
  return Tensor::from_vector<float>(DType::F32, {positions, d}, v);
}

class Bart final : public Seq2SeqLm {
 public:
  Bart(const io::Checkpoint& ckpt, const BartTraits& traits) : ckpt_(ckpt), t_(traits), c_(parse_config(ckpt, traits)) {
    prefix_ = detect_prefix();
    if (c_.shared && !ckpt_.find(p("shared.weight")) && !ckpt_.find(p("encoder.embed_tokens.weight")) &&
        !ckpt_.find(p("decoder.embed_tokens.weight")))
      bad_input("{}: no tensor {} (the {} embedding) in the checkpoint", ckpt_.dir().string(), p("shared.weight"),
                t_.hf_class);
    // The model's own `shared` is read by neither stack's forward when each saved its embed_tokens and
    // the head is saved: a copy of the tie then.
    if (ckpt_.find(p("shared.weight")) && ckpt_.find(p("encoder.embed_tokens.weight")) &&
        ckpt_.find(p("decoder.embed_tokens.weight")) && ckpt_.find("lm_head.weight"))
      ckpt_.mark_used(p("shared.weight"));
    // fairseq's version buffers, which BartPreTrainedModel ignores on load.
    for (const char* stack : {"encoder", "decoder"})
      if (const std::string n = p(std::string(stack) + ".version"); ckpt_.find(n)) ckpt_.mark_used(n);
    if (t_.positions == Positions::Sinusoidal)
      for (const char* stack : {"encoder", "decoder"})
        if (!ckpt_.find(p(std::string(stack) + ".embed_positions.weight")) && !positions_)
          positions_ = sinusoidal_table(c_.max_positions, c_.d_model);
    s_.model_type = t_.model_type;
    s_.hf_class = t_.hf_class;
    s_.vocab_size = c_.target_vocab_size;
    s_.hidden_size = c_.d_model;
    s_.num_layers = c_.decoder_layers;
    s_.num_heads = c_.decoder_heads;
    s_.eos_token_ids = c_.eos_token_ids;
    s_.bos_token_id = c_.bos_token_id;
    s_.pad_token_id = c_.pad_token_id;
    const bool own_head = ckpt_.find(head_name()) != nullptr;
    s_.features = {
        {"layers", fmt::format("encoder {}, decoder {}, {}{}", c_.encoder_layers, c_.decoder_layers,
                               t_.pre_norm ? "pre-norm with a final layer_norm per stack" : "post-norm",
                               t_.layernorm_embedding ? ", layernorm_embedding" : "")},
        {"attention", fmt::format("encoder {} heads, decoder {} heads x {}, scaled by head_dim^-0.5, biased projections",
                                  c_.encoder_heads, c_.decoder_heads, c_.d_model / c_.decoder_heads)},
        {"positions", speech() ? fmt::format("encoder sinusoidal ({} saved), decoder learned ({})", c_.source_positions,
                                             c_.target_positions)
                      : t_.positions == Positions::Learned
                          ? fmt::format("learned, offset 2 ({} positions)", c_.max_positions)
                          : fmt::format("sinusoidal ({} positions{})", c_.max_positions,
                                        positions_ ? ", computed" : ", from the checkpoint")},
        {"embedding", fmt::format("{}{}", c_.shared ? "shared" : "separate encoder and decoder vocabularies",
                                  c_.scale_embedding ? ", scaled by sqrt(d_model)" : "")},
        {"feed-forward", fmt::format("fc1/{}/fc2 ({} encoder, {} decoder)", activation_name(c_.act), c_.encoder_ffn,
                                     c_.decoder_ffn)},
        {"head", fmt::format("{}{}", own_head ? t_.head : "tied to the embedding",
                             ckpt_.find("final_logits_bias") ? ", final_logits_bias" : "")},
        {"decoder start", fmt::format("token {}", c_.decoder_start_token_id)},
    };
    if (speech())
      s_.features.insert(s_.features.begin(),
                         {"source", fmt::format("{} mel bins x {} frames, conv1/gelu/conv2 (stride 2)/gelu", c_.mel_bins,
                                                2 * c_.source_positions)});
  }

  const ModelSummary& summary() const override { return s_; }
  int64_t decoder_start_token_id() const override { return c_.decoder_start_token_id; }
  int64_t decoder_layers() const override { return c_.decoder_layers; }
  int64_t heads() const override { return c_.decoder_heads; }
  int64_t head_dim() const override { return c_.d_model / c_.decoder_heads; }
  PositionLimits position_limits() const override {
    if (speech()) return {c_.source_positions, c_.target_positions};
    // Learned tables have max_position_embeddings rows to index; Marian's sinusoidal table as many.
    return {c_.max_positions, c_.max_positions};
  }
  Seq2SeqSource source() const override {
    if (!speech()) return {};
    return {.speech = true, .mel_bins = c_.mel_bins, .frames = 2 * c_.source_positions,
            .encoder_length = c_.source_positions};
  }

  ir::ValueId encode(ir::Builder& b, const EncoderInputs& in) const override {
    auto stack = b.scope("encoder");
    ir::ValueId h, bias;
    if (speech()) {
      h = mel_stem(b, in.input_features);
      bias = no_mask(b);
    } else {
      ir::ValueId seq = b.squeeze(b.shape_of(in.input_ids, 1, 2), {0});
      h = embed(b, "encoder", in.input_ids, b.add1("Range", {b.i64(0), seq, b.i64(1)}));
      auto s = b.scope("attention_mask");
      bias = b.add1("PaddingBias", {in.attention_mask});  // [b, 1, 1, s]
    }
    const int64_t heads = c_.encoder_heads;
    for (int64_t i = 0; i < c_.encoder_layers; ++i) {
      auto layer = b.scope(fmt::format("layers.{}", i));
      const std::string l = p(fmt::format("encoder.layers.{}.", i));
      h = sublayer(b, h, l + "self_attn_layer_norm", "self_attn", [&](ir::ValueId x) {
        ir::ValueId q = project(b, x, l + "self_attn.q_proj", heads);
        ir::ValueId k = project(b, x, l + "self_attn.k_proj", heads, t_.key_bias);
        ir::ValueId v = project(b, x, l + "self_attn.v_proj", heads);
        return attend(b, q, k, v, bias, l + "self_attn.out_proj", heads);
      });
      h = sublayer(b, h, l + "final_layer_norm", "mlp", [&](ir::ValueId x) { return mlp(b, x, l, c_.encoder_ffn); });
      b.graph().rename(h, fmt::format("/encoder/layers.{}/output", i));
    }
    if (t_.pre_norm) h = layer_norm(b, h, p("encoder.layer_norm"), "layer_norm");
    return h;
  }

  Seq2SeqDecoderOutputs decode(ir::Builder& b, const Seq2SeqDecoderInputs& in) const override {
    auto stack = b.scope("decoder");
    Seq2SeqDecoderOutputs out;
    ir::ValueId self_bias, cross_bias = ir::kNone;
    StepPositions pos;
    {
      auto s = b.scope("attention_mask");
      pos = step_positions(b, in);
      self_bias = causal_bias(b, pos);  // [1, 1, s, t]
      // Whisper's decoder reads no source mask: its features are never padded.
      cross_bias = in.encoder_attention_mask != ir::kNone
                       ? b.add1("PaddingBias", {in.encoder_attention_mask})  // [b, 1, 1, enc]
                       : no_mask(b);
    }
    ir::ValueId h = embed(b, "decoder", in.input_ids, pos.queries);
    const bool first = in.encoder_hidden_states != ir::kNone;
    const int64_t heads = c_.decoder_heads;
    for (int64_t i = 0; i < c_.decoder_layers; ++i) {
      auto layer = b.scope(fmt::format("layers.{}", i));
      const std::string l = p(fmt::format("decoder.layers.{}.", i));
      h = sublayer(b, h, l + "self_attn_layer_norm", "self_attn", [&](ir::ValueId x) {
        ir::ValueId q = project(b, x, l + "self_attn.q_proj", heads);
        ir::ValueId k = project(b, x, l + "self_attn.k_proj", heads, t_.key_bias);
        ir::ValueId v = project(b, x, l + "self_attn.v_proj", heads);
        k = update_self_cache(b, in, in.past_key, i, k);
        v = update_self_cache(b, in, in.past_value, i, v);
        out.present_key.push_back(k);
        out.present_value.push_back(v);
        return attend(b, q, k, v, self_bias, l + "self_attn.out_proj", heads);
      });
      h = sublayer(b, h, l + "encoder_attn_layer_norm", "cross_attn", [&](ir::ValueId x) {
        ir::ValueId q = project(b, x, l + "encoder_attn.q_proj", heads);
        ir::ValueId k, v;
        if (first) {
          std::tie(k, v) = cross_projections(b, in.encoder_hidden_states, i);
          if (!in.cross_key.empty()) {  // the merged decoder: the carried state once there is one
            k = kept_or_computed(b, in.cross_key[size_t(i)], k);
            v = kept_or_computed(b, in.cross_value[size_t(i)], v);
          }
          out.cross_key.push_back(k);
          out.cross_value.push_back(v);
        } else {
          // The carried keys/values stand for these projections: bound all the same, so weight
          // accounting holds for a graph that does not read them.
          for (const std::string w : {"k_proj", "v_proj"}) {
            ckpt_.mark_used(l + "encoder_attn." + w + ".weight");
            if (w == "v_proj" || t_.key_bias) ckpt_.mark_used(l + "encoder_attn." + w + ".bias");
          }
          k = in.cross_key[size_t(i)];
          v = in.cross_value[size_t(i)];
        }
        return attend(b, q, k, v, cross_bias, l + "encoder_attn.out_proj", heads);
      });
      h = sublayer(b, h, l + "final_layer_norm", "mlp", [&](ir::ValueId x) { return mlp(b, x, l, c_.decoder_ffn); });
      b.graph().rename(h, fmt::format("/decoder/layers.{}/output", i));
    }
    if (t_.pre_norm) h = layer_norm(b, h, p("decoder.layer_norm"), "layer_norm");
    const bool own_head = ckpt_.find(head_name()) != nullptr;
    out.logits = lm_head(b, ckpt_, h, own_head ? ir::kNone : embedding_table(b, "lm_head"), !own_head,
                         c_.target_vocab_size, c_.d_model, head_name());
    if (ckpt_.find("final_logits_bias")) {
      auto s = b.scope("final_logits_bias");
      out.logits = b.plus(out.logits, bind_weight(b, ckpt_, "final_logits_bias", {1, c_.target_vocab_size},
                                                  "the decoder's vocabulary"));
    }
    return out;
  }

  CrossState cross_state(ir::Builder& b, ir::ValueId encoder_hidden_states) const override {
    auto stack = b.scope("decoder");
    CrossState out;
    for (int64_t i = 0; i < c_.decoder_layers; ++i) {
      auto layer = b.scope(fmt::format("layers.{}", i));
      auto attn = b.scope("cross_attn");
      auto [k, v] = cross_projections(b, encoder_hidden_states, i);
      out.key.push_back(k);
      out.value.push_back(v);
    }
    return out;
  }

 private:
  // Decoder layer `i`'s cross-attention keys and values over the encoder's output, [b, heads, enc, d].
  std::pair<ir::ValueId, ir::ValueId> cross_projections(ir::Builder& b, ir::ValueId hidden, int64_t i) const {
    const std::string l = p(fmt::format("decoder.layers.{}.", i));
    return {project(b, hidden, l + "encoder_attn.k_proj", c_.decoder_heads, t_.key_bias),
            project(b, hidden, l + "encoder_attn.v_proj", c_.decoder_heads)};
  }

  // Checkpoint name `name` under the model's prefix ("model." as BartForConditionalGeneration saves it).
  std::string p(const std::string& name) const { return prefix_ + name; }
  bool speech() const { return t_.source == Source::Mel; }
  std::string head_name() const { return t_.head + ".weight"; }

  // A bias that masks nothing, for Whisper's attention (no padding to mask): [1, 1, 1, 1] zeros.
  static ir::ValueId no_mask(ir::Builder& b) {
    return b.constant(Tensor::from_vector<float>(DType::F32, {1, 1, 1, 1}, {0.0f}), "no_mask");
  }

  // One Conv1d (kernel 3, padding 1, stride `stride`) over x [b, frames, in] -> [b, out_frames, out]:
  // the taps at frames t*stride - 1, t*stride, t*stride + 1 of the zero-padded input side by side in
  // Conv1d's weight order (channel-major, [b, out_frames, in * 3]) times weight [out, in, 3] read as
  // [out, in * 3], plus bias. The frame count is fixed (Whisper's), so each tap is a static Slice.
  ir::ValueId conv1d(ir::Builder& b, ir::ValueId x, const std::string& prefix, int64_t in, int64_t out,
                     int64_t frames, int64_t stride) const {
    auto s = b.scope(prefix.substr(prefix.rfind('.') + 1));
    ir::ValueId zeros = b.add1("Expand", {b.constant(Tensor(DType::F32, {1, 1, in}), "conv_padding"),
                                          b.concat({b.shape_of(x, 0, 1), b.i64s({1, in})}, 0)});
    ir::ValueId padded = b.concat({zeros, x, zeros}, 1);  // [b, frames + 2, in]
    const int64_t out_frames = (frames - 1) / stride + 1;
    std::vector<ir::ValueId> taps;
    for (int64_t k = 0; k < 3; ++k)
      taps.push_back(b.unsqueeze(b.add1("Slice", {padded, b.i64s({k}), b.i64s({k + stride * (out_frames - 1) + 1}),
                                                    b.i64s({1}), b.i64s({stride})}),
                                 {3}));
    ir::ValueId cols = b.reshape(b.concat(taps, 3), {0, 0, in * 3});
    const std::string why = fmt::format("Conv1d {} -> {}, kernel 3", in, out);
    ir::ValueId w = bind_weight(b, ckpt_, prefix + ".weight", {out, in, 3}, why,
                                [&](ir::WeightRef r) { return r.reshaped({out, in * 3}); });
    return b.add1("Linear", {cols, w, bind_weight(b, ckpt_, prefix + ".bias", {out}, why)});
  }

  // Whisper's stem: gelu(conv1), gelu(conv2) (stride 2), plus the saved sinusoidal positions.
  ir::ValueId mel_stem(ir::Builder& b, ir::ValueId features) const {
    const int64_t frames = 2 * c_.source_positions;
    ir::ValueId x = b.transpose(features, {0, 2, 1});  // [b, frames, mel]
    x = activation(b, conv1d(b, x, p("encoder.conv1"), c_.mel_bins, c_.d_model, frames, 1), Activation::Gelu);
    x = activation(b, conv1d(b, x, p("encoder.conv2"), c_.d_model, c_.d_model, frames, 2), Activation::Gelu);
    auto s = b.scope("embed_positions");
    return b.plus(x, bind_weight(b, ckpt_, p("encoder.embed_positions.weight"), {c_.source_positions, c_.d_model},
                                 fmt::format("max_source_positions={}, d_model={}", c_.source_positions, c_.d_model)));
  }

  std::string detect_prefix() const {
    for (const char* prefix : {"model.", ""})
      if (ckpt_.find(std::string(prefix) + "encoder.layers.0.self_attn.q_proj.weight")) return prefix;
    bad_input("{}: no tensor model.encoder.layers.0.self_attn.q_proj.weight (the {} encoder's first layer) in the "
              "checkpoint",
              ckpt_.dir().string(), t_.hf_class);
  }

  std::string why() const {
    return fmt::format("d_model={}, encoder_attention_heads={}, decoder_attention_heads={}, encoder_ffn_dim={}, "
                       "decoder_ffn_dim={}",
                       c_.d_model, c_.encoder_heads, c_.decoder_heads, c_.encoder_ffn, c_.decoder_ffn);
  }

  // The table `user` ("encoder", "decoder": its stack's own embed_tokens.weight first; "lm_head") reads:
  // what the checkpoint saved for it, else the shared embedding under the first name it was saved by.
  // Marian's unshared vocabularies: each stack its own, the head the decoder's.
  ir::ValueId embedding_table(ir::Builder& b, const std::string& user) const {
    std::vector<std::string> names;
    if (c_.shared) {
      names = {p(user + ".embed_tokens.weight"), p("shared.weight"), p("encoder.embed_tokens.weight"),
               p("decoder.embed_tokens.weight")};
      if (user == "lm_head") names.erase(names.begin());
    } else {
      names = {p((user == "encoder" ? "encoder" : "decoder") + std::string(".embed_tokens.weight"))};
    }
    const int64_t rows = user == "encoder" ? c_.vocab_size : c_.target_vocab_size;
    for (const auto& name : names)
      if (ckpt_.find(name))
        return bind_weight(b, ckpt_, name, {rows, c_.d_model},
                           fmt::format("{}={}, d_model={}", user == "encoder" || c_.shared ? "vocab_size" : "decoder_vocab_size",
                                       rows, c_.d_model));
    bad_input("{}: no tensor {} (the {} embedding {} reads) in the checkpoint", ckpt_.dir().string(), names.front(),
              t_.hf_class, user);
  }

  // Token embedding (times sqrt(d_model) when scale_embedding) plus the positions' rows, then
  // layernorm_embedding (BART, mBART).
  ir::ValueId embed(ir::Builder& b, const std::string& stack, ir::ValueId ids, ir::ValueId positions) const {
    ir::ValueId h;
    {
      auto s = b.scope("embed_tokens");
      h = b.add1("Embedding", {embedding_table(b, stack), ids});
      if (c_.scale_embedding) h = b.times(h, b.f32(float(std::sqrt(double(c_.d_model)))));
    }
    {
      auto s = b.scope("embed_positions");
      const std::string name = p(stack + ".embed_positions.weight");
      ir::ValueId table;
      if (speech()) {
        table = bind_weight(b, ckpt_, name, {c_.target_positions, c_.d_model},
                            fmt::format("max_target_positions={}, d_model={}", c_.target_positions, c_.d_model));
      } else if (t_.positions == Positions::Learned) {
        table = bind_weight(b, ckpt_, name, {c_.max_positions + t_.position_offset, c_.d_model},
                            fmt::format("max_position_embeddings={} + {}, d_model={}", c_.max_positions,
                                        t_.position_offset, c_.d_model));
        positions = b.plus(positions, b.i64(t_.position_offset));
      } else if (ckpt_.find(name)) {
        table = bind_weight(b, ckpt_, name, {c_.max_positions, c_.d_model},
                            fmt::format("max_position_embeddings={}, d_model={}", c_.max_positions, c_.d_model));
      } else {
        table = b.weight(name, ir::WeightRef::constant(*positions_));
      }
      h = b.plus(h, b.add1("Embedding", {table, positions}));  // [s, d] over the batch
    }
    if (t_.layernorm_embedding) h = layer_norm(b, h, p(stack + ".layernorm_embedding"), "layernorm_embedding");
    return h;
  }

  ir::ValueId layer_norm(ir::Builder& b, ir::ValueId x, const std::string& prefix, const std::string& scope) const {
    return norm(b, ckpt_, x, prefix, c_.d_model, NormKind::Layer, kLayerNormEps, true, scope);
  }

  // One residual sub-layer around f: x + f(norm(x)) (pre-norm, mBART) or norm(x + f(x)) (BART, Marian).
  template <class F>
  ir::ValueId sublayer(ir::Builder& b, ir::ValueId h, const std::string& norm_prefix, const std::string& scope,
                       F&& f) const {
    auto s = b.scope(scope);
    if (t_.pre_norm) return b.plus(h, f(layer_norm(b, h, norm_prefix, "norm")));
    return layer_norm(b, b.plus(h, f(h)), norm_prefix, "norm");
  }

  // [b, s, d_model] -> [b, heads, s, d_model / heads]
  ir::ValueId project(ir::Builder& b, ir::ValueId x, const std::string& prefix, int64_t heads, bool bias = true) const {
    return split_heads(b, linear(b, ckpt_, x, prefix, c_.d_model, c_.d_model, bias, why()), heads, c_.d_model / heads);
  }

  // softmax(q k^T * head_dim^-0.5 + bias) v, heads merged, then the output projection `o`.
  ir::ValueId attend(ir::Builder& b, ir::ValueId q, ir::ValueId k, ir::ValueId v, ir::ValueId bias, const std::string& o,
                     int64_t heads) const {
    const double scale = std::pow(double(c_.d_model / heads), -0.5);
    ir::ValueId a = b.add1("Attention", {q, k, v, bias}, {{"scale", scale}});
    a = b.reshape(b.transpose(a, {0, 2, 1, 3}), {0, 0, c_.d_model});
    return linear(b, ckpt_, a, o, c_.d_model, c_.d_model, true, why());
  }

  // fc2(act(fc1(x))) of layer `l`.
  ir::ValueId mlp(ir::Builder& b, ir::ValueId x, const std::string& l, int64_t ffn) const {
    ir::ValueId up = linear(b, ckpt_, x, l + "fc1", c_.d_model, ffn, true, why());
    return linear(b, ckpt_, activation(b, up, c_.act), l + "fc2", ffn, c_.d_model, true, why());
  }

  const io::Checkpoint& ckpt_;
  const BartTraits& t_;
  BartConfig c_;
  std::string prefix_;
  std::optional<Tensor> positions_;  // Marian's sinusoidal table when the checkpoint lacks one of them
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<Seq2SeqLm> make_bart(const io::Checkpoint& ckpt) { return std::make_unique<Bart>(ckpt, kBart); }
std::unique_ptr<Seq2SeqLm> make_mbart(const io::Checkpoint& ckpt) { return std::make_unique<Bart>(ckpt, kMBart); }
std::unique_ptr<Seq2SeqLm> make_marian(const io::Checkpoint& ckpt) { return std::make_unique<Bart>(ckpt, kMarian); }
std::unique_ptr<Seq2SeqLm> make_whisper(const io::Checkpoint& ckpt) { return std::make_unique<Bart>(ckpt, kWhisper); }

}  // namespace hfx::models
