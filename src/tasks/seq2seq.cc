#include "tasks/seq2seq.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "ir/builder.h"
#include "tasks/task.h"

namespace hfx::tasks {

namespace {

const std::string kBatch = "batch_size";
const std::string kEncoder = "encoder_sequence_length";
const std::string kSeq = "decoder_sequence_length";
const std::string kPast = "past_decoder_sequence_length";
const std::string kTotal = "total_decoder_sequence_length";
// The merged decoder's carried cross state: 0 on its first step, the source's length after.
const std::string kPastEncoder = "past_encoder_sequence_length";

// Bounds: a step has a row and a token, a source has a token; only the past may be empty; a learned
// position table bounds the lengths it indexes. --dim tightens them, --dynamic drops them. Only the
// symbols the graph uses are kept.
void declare_bounds(ir::Graph& g, const models::Seq2SeqLm& model, const CausalLmOptions& o) {
  auto& syms = g.symbols();
  if (!o.dynamic) {
    const models::PositionLimits limits = model.position_limits();
    for (const auto& name : seq2seq_dim_names()) {
      std::optional<int64_t> max;
      if (name == kEncoder || name == kPastEncoder) max = limits.source;
      else if (name == kSeq || name == kTotal) max = limits.target;
      else if (name == kPast && limits.target) max = *limits.target - 1;
      syms.set_bounds(name, {name == kPast || name == kPastEncoder ? 0 : 1, max});
    }
    for (const auto& [name, b] : o.dims) syms.set_bounds(name, b);
  }
  keep_used_symbols(g);
}

// A static cache (--static-cache) makes the self-attention state buffers of max_cache_len.
std::vector<StatePort> state_ports(const models::Seq2SeqLm& model, const CausalLmOptions& o) {
  const auto static_length = o.static_cache ? std::optional<int64_t>(o.max_cache_len) : std::nullopt;
  return name_states(ir::encoder_decoder_states(model.decoder_layers(), model.heads(), model.head_dim(), kPast, kEncoder,
                                                static_length),
                     state_names(StateNames::Seq2Seq));
}

bool is_cross(const StatePort& p) {
  return p.spec.kind == StateKind::CrossAttentionKey || p.spec.kind == StateKind::CrossAttentionValue;
}

Component build_encoder(const models::Seq2SeqLm& model, const CausalLmOptions& o) {
  const Shape ids = {Dim::sym(kBatch), Dim::sym(kEncoder)};
  const models::Seq2SeqSource source = model.source();
  Component c{"encoder", "encoder_model", ir::Graph("main"), {}, {}, {}, {}};
  const Dim hidden = Dim::fixed(model.summary().hidden_size);
  models::EncoderInputs in;
  if (source.speech) {
    // Whisper's encoder takes one length only: both are fixed.
    const Shape features = {Dim::sym(kBatch), Dim::fixed(source.mel_bins), Dim::fixed(source.frames)};
    c.inputs = {{"input_features", DType::F32, features}};
    c.outputs = {{"last_hidden_state", DType::F32, {Dim::sym(kBatch), Dim::fixed(source.encoder_length), hidden}}};
    in.input_features = c.graph.add_input("input_features", DType::F32, features);
  } else {
    c.inputs = {{"input_ids", DType::I64, ids}, {"attention_mask", DType::I64, ids}};
    c.outputs = {{"last_hidden_state", DType::F32, {Dim::sym(kBatch), Dim::sym(kEncoder), hidden}}};
    in.input_ids = c.graph.add_input("input_ids", DType::I64, ids);
    in.attention_mask = c.graph.add_input("attention_mask", DType::I64, ids);
  }
  ir::Builder b(c.graph);
  name_outputs(c, b, {model.encode(b, in)});
  declare_bounds(c.graph, model, o);
  c.graph.validate();
  return c;
}

// The decoder's graphs: the first step (reads encoder_hidden_states, returns every state), a later
// step (reads the carried state, returns the self-attention cache), or both in one graph (Merged:
// Optimum's and transformers.js's decoder_model_merged, with use_cache_branch; an empty past on the
// first step, the cross state computed then and carried after, kept_or_computed). With a static cache
// every step reads the self-attention buffers (zeros before the first) and cache_position, the slots
// its tokens are written at; there is no merged graph then.
enum class Step { First, WithPast, Merged };

Component build_decoder(const models::Seq2SeqLm& model, const CausalLmOptions& o, Step step) {
  std::vector<StatePort> ports = state_ports(model, o);
  const bool reads_past = step != Step::First, reads_hidden = step != Step::WithPast;
  const bool reads_buffers = o.static_cache;
  const auto reads = [&](const StatePort& p) { return reads_past || (reads_buffers && !is_cross(p)); };
  static const char* const kRoles[] = {"decoder", "decoder_with_past", "decoder_merged"};
  static const char* const kStems[] = {"decoder_model", "decoder_with_past_model", "decoder_model_merged"};
  Component c{kRoles[int(step)], kStems[int(step)], ir::Graph("main"), {}, {}, {}, {}};
  ir::Graph& g = c.graph;
  g.symbols().relate_sum(kTotal, kPast, kSeq);
  const int64_t hidden = model.summary().hidden_size;
  c.inputs = {{"input_ids", DType::I64, {Dim::sym(kBatch), Dim::sym(kSeq)}}};
  const bool masked_source = !model.source().speech;
  if (masked_source) c.inputs.push_back({"encoder_attention_mask", DType::I64, {Dim::sym(kBatch), Dim::sym(kEncoder)}});
  if (reads_hidden)
    c.inputs.push_back({"encoder_hidden_states", DType::F32, {Dim::sym(kBatch), Dim::sym(kEncoder), Dim::fixed(hidden)}});
  for (const auto& p : ports) {
    if (!reads(p)) continue;
    Shape shape = state_shape(p.spec, o.static_cache ? Dim::fixed(o.max_cache_len) : Dim::sym(kPast));
    if (step == Step::Merged && is_cross(p)) shape[size_t(p.spec.axis)] = Dim::sym(kPastEncoder);
    c.inputs.push_back({p.past, p.spec.dtype, shape});
  }
  if (o.static_cache) c.inputs.push_back({"cache_position", DType::I64, {Dim::sym(kSeq)}});
  // Read by no node: clients that see it feed a merged decoder (Optimum tells one by this input).
  if (step == Step::Merged) c.inputs.push_back({"use_cache_branch", DType::Bool, {Dim::fixed(1)}});
  c.outputs = {{"logits", DType::F32, {Dim::sym(kBatch), Dim::sym(kSeq), Dim::fixed(model.summary().vocab_size)}}};
  for (const auto& p : ports)
    if (step != Step::WithPast || !is_cross(p))
      c.outputs.push_back({p.present, p.spec.dtype,
                           state_shape(p.spec, o.static_cache ? Dim::fixed(o.max_cache_len) : Dim::sym(reads_past ? kTotal : kSeq))});

  std::map<std::string, ir::ValueId> ids;
  for (const auto& spec : c.inputs) ids[spec.name] = g.add_input(spec.name, spec.dtype, spec.shape);
  models::Seq2SeqDecoderInputs in;
  in.input_ids = ids.at("input_ids");
  if (masked_source) in.encoder_attention_mask = ids.at("encoder_attention_mask");
  if (reads_hidden) in.encoder_hidden_states = ids.at("encoder_hidden_states");
  for (const auto& p : ports) {
    if (!reads(p)) continue;
    auto& slot = p.spec.kind == StateKind::SelfAttentionKey     ? in.past_key
                 : p.spec.kind == StateKind::SelfAttentionValue ? in.past_value
                 : p.spec.kind == StateKind::CrossAttentionKey  ? in.cross_key
                                                                : in.cross_value;
    slot.push_back(ids.at(p.past));  // ports are in layer order
  }
  if (o.static_cache) in.cache_position = ids.at("cache_position");
  ir::Builder b(g);
  const models::Seq2SeqDecoderOutputs out = model.decode(b, in);
  std::vector<ir::ValueId> values = {out.logits};
  for (const auto& p : ports) {
    if (step == Step::WithPast && is_cross(p)) continue;
    const auto& list = p.spec.kind == StateKind::SelfAttentionKey     ? out.present_key
                       : p.spec.kind == StateKind::SelfAttentionValue ? out.present_value
                       : p.spec.kind == StateKind::CrossAttentionKey  ? out.cross_key
                                                                      : out.cross_value;
    HFX_CHECK(size_t(p.spec.layer) < list.size(), "the model returned no {} for layer {}", state_kind_name(p.spec.kind),
              p.spec.layer);
    values.push_back(list[size_t(p.spec.layer)]);
  }
  name_outputs(c, b, values);
  c.state = std::move(ports);
  declare_bounds(g, model, o);
  g.validate();
  return c;
}

// onnxruntime-genai's Whisper layout (reference/peer-contracts.md 1.3; genai 0.18's
// src/models/whisper.cpp and builders/whisper.py):
//
//   encoder  encoder.onnx
//     audio_features  f32 [batch_size, mel_bins, frames]            (genai feeds 3000 frames only)
//     -> hidden_states                f32 [batch_size, encoder_length, hidden]
//        present_key|value_cross_{i}  f32 [batch_size, heads, encoder_length, head_dim]: the cross state,
//                                     computed once here (Seq2SeqLm::cross_state)
//   decoder_with_past  decoder.onnx: every step, the first from an empty self-attention past
//     input_ids  i32 [batch_size, decoder_sequence_length]     (genai feeds int32 ids; Cast to i64)
//     past_key|value_self_{i}   [batch_size, heads, past_decoder_sequence_length, head_dim]
//     past_key|value_cross_{i}  [batch_size, heads, encoder_sequence_length, head_dim]
//     -> logits, present_key|value_self_{i} [..., total_decoder_sequence_length, ...]
//
// The decoder is the optimum layout's decoder_with_past step under genai's names, which serves the
// first step too: its positions start at the past's length, 0 for an empty past.
std::vector<StatePort> genai_state_ports(const models::Seq2SeqLm& model) {
  return name_states(ir::encoder_decoder_states(model.decoder_layers(), model.heads(), model.head_dim(), kPast, kEncoder),
                     state_names(StateNames::GenaiWhisper));
}

Component build_genai_encoder(const models::Seq2SeqLm& model, const CausalLmOptions& o) {
  const models::Seq2SeqSource source = model.source();
  Component c{"encoder", "encoder", ir::Graph("main"), {}, {}, {}, {}};
  const Shape features = {Dim::sym(kBatch), Dim::fixed(source.mel_bins), Dim::fixed(source.frames)};
  c.inputs = {{"audio_features", DType::F32, features}};
  c.outputs = {{"hidden_states", DType::F32,
                {Dim::sym(kBatch), Dim::fixed(source.encoder_length), Dim::fixed(model.summary().hidden_size)}}};
  const std::vector<StatePort> ports = genai_state_ports(model);
  // The cross state's length is the encoder's, fixed like it (genai allocates it so).
  for (const auto& p : ports)
    if (is_cross(p)) {
      Shape shape = p.spec.shape;
      shape[size_t(p.spec.axis)] = Dim::fixed(source.encoder_length);
      c.outputs.push_back({p.present, p.spec.dtype, shape});
    }
  models::EncoderInputs in;
  in.input_features = c.graph.add_input("audio_features", DType::F32, features);
  ir::Builder b(c.graph);
  const ir::ValueId hidden = model.encode(b, in);
  const models::Seq2SeqLm::CrossState cross = model.cross_state(b, hidden);
  std::vector<ir::ValueId> values = {hidden};
  for (const auto& p : ports)
    if (is_cross(p))
      values.push_back((p.spec.kind == StateKind::CrossAttentionKey ? cross.key : cross.value).at(size_t(p.spec.layer)));
  name_outputs(c, b, values);
  declare_bounds(c.graph, model, o);
  c.graph.validate();
  return c;
}

Component build_genai_decoder(const models::Seq2SeqLm& model, const CausalLmOptions& o) {
  std::vector<StatePort> ports = genai_state_ports(model);
  Component c{"decoder_with_past", "decoder", ir::Graph("main"), {}, {}, {}, {}};
  ir::Graph& g = c.graph;
  g.symbols().relate_sum(kTotal, kPast, kSeq);
  c.inputs = {{"input_ids", DType::I32, {Dim::sym(kBatch), Dim::sym(kSeq)}}};
  for (const auto& p : ports) c.inputs.push_back({p.past, p.spec.dtype, state_shape(p.spec, Dim::sym(kPast))});
  c.outputs = {{"logits", DType::F32, {Dim::sym(kBatch), Dim::sym(kSeq), Dim::fixed(model.summary().vocab_size)}}};
  for (const auto& p : ports)
    if (!is_cross(p)) c.outputs.push_back({p.present, p.spec.dtype, state_shape(p.spec, Dim::sym(kTotal))});
  std::map<std::string, ir::ValueId> ids;
  for (const auto& spec : c.inputs) ids[spec.name] = g.add_input(spec.name, spec.dtype, spec.shape);
  ir::Builder b(g);
  models::Seq2SeqDecoderInputs in;
  in.input_ids = b.cast(ids.at("input_ids"), DType::I64);
  for (const auto& p : ports) {
    auto& slot = p.spec.kind == StateKind::SelfAttentionKey     ? in.past_key
                 : p.spec.kind == StateKind::SelfAttentionValue ? in.past_value
                 : p.spec.kind == StateKind::CrossAttentionKey  ? in.cross_key
                                                                : in.cross_value;
    slot.push_back(ids.at(p.past));
  }
  const models::Seq2SeqDecoderOutputs out = model.decode(b, in);
  std::vector<ir::ValueId> values = {out.logits};
  for (const auto& p : ports)
    if (!is_cross(p))
      values.push_back((p.spec.kind == StateKind::SelfAttentionKey ? out.present_key : out.present_value)
                           .at(size_t(p.spec.layer)));
  name_outputs(c, b, values);
  c.state = std::move(ports);
  declare_bounds(g, model, o);
  g.validate();
  return c;
}

class Seq2SeqTask final : public Task {
 public:
  const std::string& name() const override {
    static const std::string n = "seq2seq-lm";
    return n;
  }
  std::vector<models::ModuleKind> needs() const override { return {models::ModuleKind::Seq2Seq}; }
  std::vector<std::string> roles() const override { return {"encoder", "decoder", "decoder_with_past", "decoder_merged"}; }
  // Not yet the steps of hfx's decode loop: generate and the greedy checks drive causal steps only;
  // the export's check runs each graph on its shape cases.
  bool generative() const override { return false; }
  std::string contract_summary() const override { return "encoder + decoder steps (Optimum's seq2seq layout)"; }
  std::vector<Component> components(const models::Model& model, const CausalLmOptions& options) const override {
    return build_seq2seq(model.seq2seq(), options);
  }
};

}  // namespace

const std::vector<std::string>& seq2seq_dim_names() {
  static const std::vector<std::string> names = {kBatch, kEncoder, kSeq, kPast, kTotal, kPastEncoder};
  return names;
}

std::vector<Component> build_seq2seq(const models::Seq2SeqLm& model, const CausalLmOptions& o) {
  if (o.split_prefill)
    bad_input("--split-prefill applies to decoder-only models: an encoder-decoder is exported as encoder, decoder "
              "(first step) and decoder_with_past already");
  if (o.static_cache) {
    if (o.max_cache_len <= 0) bad_input("--static-cache needs --max-cache-len N (N > 0)");
    if (const auto target = model.position_limits().target; target && o.max_cache_len > *target)
      bad_input("--max-cache-len {}: {}'s decoder positions go to {} (its position table)", o.max_cache_len,
                model.summary().model_type, *target);
    if (o.seq2seq_layout == "genai")
      bad_input("--static-cache with --onnx-layout genai: onnxruntime-genai's Whisper decoder grows its cache; export "
                "the static cache in the optimum layout (the default)");
  }
  for (const auto& [name, b] : o.dims) {
    const auto& names = seq2seq_dim_names();
    if (std::find(names.begin(), names.end(), name) == names.end())
      bad_input("--dim {}: an encoder-decoder's dims are {}", name, fmt::join(names, ", "));
  }
  std::vector<Component> out;
  if (o.seq2seq_layout == "genai") {
    // onnxruntime-genai runs Whisper only (its model.type "whisper"), and feeds its encoder 3000 frames.
    if (!model.source().speech)
      bad_input("--onnx-layout genai is onnxruntime-genai's Whisper layout; {} is a text encoder-decoder, which genai "
                "has no runtime for: export it with --onnx-layout optimum (the default)", model.summary().model_type);
    // genai 0.18 takes 3000 frames only (whisper.h's num_frames_, checked against audio_features' shape)
    // and sizes hidden_states and the cross state for 1500 positions.
    constexpr int64_t kGenaiFrames = 3000;
    if (model.source().frames != kGenaiFrames)
      bad_input("--onnx-layout genai: onnxruntime-genai feeds Whisper's encoder {} frames (max_source_positions 1500); "
                "this model's encoder reads {} (max_source_positions {}), which genai refuses",
                kGenaiFrames, model.source().frames, model.source().encoder_length);
    out.push_back(build_genai_encoder(model, o));
    out.push_back(build_genai_decoder(model, o));
    for (auto& c : out) c.own_weight_files = true;
    return out;
  }
  if (o.seq2seq_layout != "optimum")
    fail(ErrorKind::Internal, "unknown encoder-decoder layout {}", o.seq2seq_layout);
  out.push_back(build_encoder(model, o));
  out.push_back(build_decoder(model, o, Step::First));
  out.push_back(build_decoder(model, o, Step::WithPast));
  // Optimum's and transformers.js's merged decoder carries a growing cache; a static one has none.
  if (!o.static_cache) out.push_back(build_decoder(model, o, Step::Merged));
  // Optimum and transformers.js fetch each graph with its own `_data` file.
  for (auto& c : out) c.own_weight_files = true;
  return out;
}

const Task& seq2seq_task() {
  static const Seq2SeqTask task;
  return task;
}

}  // namespace hfx::tasks
