#include "tasks/state_names.h"

#include <fmt/format.h>

#include "core/error.h"

namespace hfx::tasks {

namespace {

using K = StateKind;

// Self-attention as every decoder client names it.
#define HFX_DECODER_KV                                                        \
  {K::SelfAttentionKey, "past_key_values.{}.key", "present.{}.key"},          \
  {K::SelfAttentionValue, "past_key_values.{}.value", "present.{}.value"}

const StateNameSet kDecoder = {"decoder",
                               "Optimum, transformers.js, onnxruntime-genai (genai_config.json), OpenVINO GenAI",
                               {HFX_DECODER_KV}};

const StateNameSet kSeq2Seq = {"seq2seq",
                               "Optimum and transformers.js encoder-decoders (decoder_model_merged.onnx)",
                               {{K::SelfAttentionKey, "past_key_values.{}.decoder.key", "present.{}.decoder.key"},
                                {K::SelfAttentionValue, "past_key_values.{}.decoder.value", "present.{}.decoder.value"},
                                {K::CrossAttentionKey, "past_key_values.{}.encoder.key", "present.{}.encoder.key"},
                                {K::CrossAttentionValue, "past_key_values.{}.encoder.value", "present.{}.encoder.value"}}};

const StateNameSet kTransformersJsHybrid = {"js-hybrid",
                                            "transformers.js SSM and short-convolution hybrids (granitemoehybrid, lfm2, ...); "
                                            "onnxruntime-genai's LFM2 (past_conv_names in genai_config.json)",
                                            {HFX_DECODER_KV,
                                             {K::Convolution, "past_conv.{}", "present_conv.{}"},
                                             {K::Recurrent, "past_ssm.{}", "present_ssm.{}"}}};

const StateNameSet kTransformersJsLinearAttention = {
    "js-linear-attention",
    "transformers.js gated delta-net hybrids (qwen3_next, qwen3_5_text, qwen3_5_moe_text)",
    {HFX_DECODER_KV,
     {K::Convolution, "past_conv.{}", "present_conv.{}"},
     {K::Recurrent, "past_recurrent.{}", "present_recurrent.{}"}}};

const StateNameSet kGenaiHybrid = {"genai-hybrid",
                                   "onnxruntime-genai's RecurrentState (qwen3_5, lfm2 linear attention)",
                                   {HFX_DECODER_KV,
                                    {K::Convolution, "past_key_values.{}.conv_state", "present.{}.conv_state"},
                                    {K::Recurrent, "past_key_values.{}.recurrent_state", "present.{}.recurrent_state"}}};

// onnxruntime-genai's Whisper (src/config.h's defaults, builders/whisper.py): the encoder returns the
// cross state (present_key_cross_{i}) and the decoder reads it back (past_key_cross_{i}).
const StateNameSet kGenaiWhisper = {"genai-whisper",
                                    "onnxruntime-genai's Whisper model (encoder.onnx + decoder.onnx, genai_config.json)",
                                    {{K::SelfAttentionKey, "past_key_self_{}", "present_key_self_{}"},
                                     {K::SelfAttentionValue, "past_value_self_{}", "present_value_self_{}"},
                                     {K::CrossAttentionKey, "past_key_cross_{}", "present_key_cross_{}"},
                                     {K::CrossAttentionValue, "past_value_cross_{}", "present_value_cross_{}"}}};

#undef HFX_DECODER_KV

// The text of a pattern before and after its `{}`.
std::pair<std::string_view, std::string_view> split_pattern(std::string_view pattern) {
  const size_t at = pattern.find("{}");
  HFX_CHECK(at != std::string_view::npos, "state name pattern {} has no {{}}", pattern);
  return {pattern.substr(0, at), pattern.substr(at + 2)};
}

// The layer text of `name` when it has `pattern`'s form, with any non-empty middle.
std::optional<std::string> layer_of(std::string_view pattern, std::string_view name) {
  const auto [before, after] = split_pattern(pattern);
  if (name.size() <= before.size() + after.size() || !name.starts_with(before) || !name.ends_with(after))
    return std::nullopt;
  return std::string(name.substr(before.size(), name.size() - before.size() - after.size()));
}

std::string named(std::string_view pattern, int64_t layer) { return fmt::format(fmt::runtime(pattern), layer); }

}  // namespace

const StateNameSet& state_names(StateNames which) {
  switch (which) {
    case StateNames::Decoder: return kDecoder;
    case StateNames::Seq2Seq: return kSeq2Seq;
    case StateNames::TransformersJsHybrid: return kTransformersJsHybrid;
    case StateNames::GenaiHybrid: return kGenaiHybrid;
    case StateNames::GenaiWhisper: return kGenaiWhisper;
    case StateNames::TransformersJsLinearAttention: return kTransformersJsLinearAttention;
  }
  fail(ErrorKind::Internal, "unknown state name set {}", int(which));
}

const StateNameSet* find_state_names(std::string_view name) {
  for (StateNames which : {StateNames::Decoder, StateNames::Seq2Seq, StateNames::TransformersJsHybrid, StateNames::GenaiHybrid,
                            StateNames::GenaiWhisper, StateNames::TransformersJsLinearAttention})
    if (state_names(which).name == name) return &state_names(which);
  return nullptr;
}

const StateNameSet& state_names_named(std::string_view name) {
  if (const StateNameSet* names = find_state_names(name)) return *names;
  fail(ErrorKind::Internal, "unknown state name set `{}`", name);
}

std::optional<StateKind> parse_state_kind(std::string_view name) {
  for (StateKind k : kStateKinds)
    if (state_kind_name(k) == name) return k;
  return std::nullopt;
}

std::optional<StateUpdate> parse_state_update(std::string_view name) {
  for (StateUpdate u : {StateUpdate::Append, StateUpdate::WriteAtPosition, StateUpdate::Replace, StateUpdate::Keep})
    if (state_update_name(u) == name) return u;
  return std::nullopt;
}

const StatePortPattern& state_pattern(const StateNameSet& names, StateKind kind) {
  for (const auto& p : names.patterns)
    if (p.kind == kind) return p;
  unsupported("the {} state names ({}) have no name for a {}", names.name, names.loaded_by, state_kind_name(kind));
}

std::vector<StatePort> name_states(const std::vector<StateSpec>& states, const StateNameSet& names) {
  std::vector<StatePort> ports;
  ports.reserve(states.size());
  for (const auto& s : states) {
    const auto& p = state_pattern(names, s.kind);
    ports.push_back({s, named(p.past, s.layer), named(p.present, s.layer)});
  }
  return ports;
}

std::vector<std::pair<std::string, std::string>> shared_buffers_of(const std::vector<StatePort>& ports) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& p : ports)
    if (p.spec.update == StateUpdate::WriteAtPosition) pairs.emplace_back(p.past, p.present);
  return pairs;
}

const StatePort* find_past(const std::vector<StatePort>& ports, std::string_view name) {
  for (const auto& p : ports)
    if (p.past == name) return &p;
  return nullptr;
}

const StatePort* find_present(const std::vector<StatePort>& ports, std::string_view name) {
  for (const auto& p : ports)
    if (p.present == name) return &p;
  return nullptr;
}

std::optional<ParsedStateName> parse_state_name(const StateNameSet& names, std::string_view name) {
  for (const auto& p : names.patterns)
    for (const bool past : {true, false})
      if (auto layer = layer_of(past ? p.past : p.present, name);
          layer && layer->find_first_not_of("0123456789") == std::string::npos)
        return ParsedStateName{p.kind, *layer, past};
  return std::nullopt;
}

bool looks_like_state_name(const StateNameSet& names, std::string_view name) {
  for (const auto& p : names.patterns)
    for (std::string_view pattern : {p.past, p.present})
      if (name.starts_with(split_pattern(pattern).first)) return true;
  return false;
}

std::string genai_name_pattern(std::string_view pattern) {
  const auto [before, after] = split_pattern(pattern);
  return fmt::format("{}%d{}", before, after);
}

const StatePort* first_of_kind(const std::vector<StatePort>& ports, StateKind kind) {
  for (const auto& p : ports)
    if (p.spec.kind == kind) return &p;
  return nullptr;
}

std::string openvino_variable_id(const StatePort& port) { return port.past + port.present; }

std::string name_glob(std::string_view pattern) { return fmt::format("{}*", split_pattern(pattern).first); }

std::string state_ports_glob(const StateNameSet& names) {
  HFX_CHECK(!names.patterns.empty(), "state name set {} is empty", names.name);
  const auto& p = names.patterns.front();
  return name_glob(p.past) + "/" + name_glob(p.present);
}

}  // namespace hfx::tasks
