// The names clients load state ports by, as data: the one place hfx spells `past_key_values.*` and
// `present.*`. A name set maps each StateKind a client knows to a (past input, present output)
// pattern in which `{}` is the layer index (reference/peer-contracts.md, sections 1 and 3):
//
//   decoder        past_key_values.{i}.key|value -> present.{i}.key|value: Optimum, transformers.js,
//                  onnxruntime-genai (its genai_config.json lists the same names, `%d` for the layer)
//                  and OpenVINO GenAI (whose stateful IR keeps them as variables, openvino_variable_id)
//   seq2seq        Optimum / transformers.js encoder-decoders: past_key_values.{i}.decoder.* (self) and
//                  past_key_values.{i}.encoder.* (cross) -> present.{i}.decoder|encoder.*
//   js-hybrid      transformers.js SSM / short-conv hybrids: past_conv.{i}, past_ssm.{i} ->
//                  present_conv.{i}, present_ssm.{i}, attention layers as decoder; LFM2's names in
//                  transformers.js and in onnxruntime-genai's LFM2 model (reference/peer-contracts.md
//                  3.1; genai reads them from genai_config.json's past_conv_names)
//   js-linear-attention  transformers.js gated delta-net hybrids (qwen3_next, qwen3_5_text): past_conv.{i},
//                  past_recurrent.{i} -> present_conv.{i}, present_recurrent.{i}, attention layers as decoder
//   genai-hybrid   onnxruntime-genai's RecurrentState: past_key_values.{i}.conv_state|recurrent_state ->
//                  present.{i}.*, attention layers as decoder
//   genai-whisper  onnxruntime-genai's Whisper: past_key_self_{i} -> present_key_self_{i} (decoder.onnx);
//                  the cross state present_key_cross_{i} (encoder.onnx) -> past_key_cross_{i} (decoder.onnx)
//
// `decoder` names every decoder, `js-hybrid` LFM2 (models/lfm2.cc); the others are declared for
// encoder-decoder and SSM models. A model names its set (models::CausalLm::state_names).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tasks/state.h"

namespace hfx::tasks {

struct StatePortPattern {
  StateKind kind;
  std::string_view past, present;  // `{}` is the layer index
};

struct StateNameSet {
  std::string_view name;       // "decoder", "seq2seq", ...
  std::string_view loaded_by;  // the clients that load these names
  std::vector<StatePortPattern> patterns;
};

enum class StateNames { Decoder, Seq2Seq, TransformersJsHybrid, GenaiHybrid, GenaiWhisper,
                        TransformersJsLinearAttention };
const StateNameSet& state_names(StateNames which);
// The set whose `name` is `name` ("decoder", "js-hybrid", ...); Internal error for another name (a
// model's state_names() is code, not input).
const StateNameSet& state_names_named(std::string_view name);
// The same, nullptr for an unknown name (a manifest's, which is input).
const StateNameSet* find_state_names(std::string_view name);
// The kind (update) whose state_kind_name (state_update_name) is `name`; nullopt for another.
std::optional<StateKind> parse_state_kind(std::string_view name);
std::optional<StateUpdate> parse_state_update(std::string_view name);

// A state as one component's ports: read as `past`, returned as `present`.
struct StatePort {
  StateSpec spec;
  std::string past, present;
};

// The pattern `names` gives `kind`; Unsupported naming the set when it has none.
const StatePortPattern& state_pattern(const StateNameSet& names, StateKind kind);
// Each state named by `names`, in order.
std::vector<StatePort> name_states(const std::vector<StateSpec>& states, const StateNameSet& names);

// The (past, present) pairs a runtime may bind to one buffer: the states written at a position.
std::vector<std::pair<std::string, std::string>> shared_buffers_of(const std::vector<StatePort>& ports);

// The port, among `ports`, whose past (present) name is `name`; nullptr when none is.
const StatePort* find_past(const std::vector<StatePort>& ports, std::string_view name);
const StatePort* find_present(const std::vector<StatePort>& ports, std::string_view name);
// The first port holding a state of `kind` (a recurrent state, say), or null.
const StatePort* first_of_kind(const std::vector<StatePort>& ports, StateKind kind);

// What a name that `names` could have produced says: the kind, the layer as written (any digits,
// unchecked), and which side. nullopt for a name no pattern of the set matches. Used to judge a
// graph read back from a file: a port named like state but not among the contract's is refused.
struct ParsedStateName {
  StateKind kind;
  std::string layer;
  bool past;
};
std::optional<ParsedStateName> parse_state_name(const StateNameSet& names, std::string_view name);
// Whether `name` has the form of one of the set's state ports, layer index aside (the text before
// and after `{}` of a pattern), so a read-back can say which layer it claims.
bool looks_like_state_name(const StateNameSet& names, std::string_view name);

// A pattern as onnxruntime-genai's genai_config.json writes it (`%d` for the layer).
std::string genai_name_pattern(std::string_view pattern);
// The variable an OpenVINO stateful IR keeps a state in (OpenVINO GenAI resets and reorders it by
// beam_idx; optimum-intel names its variables after the same pair).
std::string openvino_variable_id(const StatePort& port);
// "past_key_values.*" of "past_key_values.{}.key": how help texts refer to a pattern's ports.
std::string name_glob(std::string_view pattern);
// "past_key_values.*/present.*": a set's first pattern, both sides.
std::string state_ports_glob(const StateNameSet& names);

}  // namespace hfx::tasks
