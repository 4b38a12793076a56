#include "backends/onnx/ort_profile.h"

#include <algorithm>

#include "core/error.h"
#include "io/json_fields.h"
#include "tasks/state_names.h"

namespace hfx::onnx_backend {

int64_t ort_context_length(const io::Checkpoint& ckpt, const ir::Graph& graph) {
  const io::JsonFile& f = ckpt.config();
  std::optional<int64_t> n = io::optional_int(f, f.json, "max_position_embeddings", 1);
  if (!n) n = io::optional_int(f, f.json, "n_positions", 1);
  // Dynamic NTK scaling extends the context past max_position_embeddings by its factor (the caches are
  // computed per step, so only genai's max length reads this).
  for (const auto& node : graph.nodes())
    if (node.op == "RopeCosSin" && node.attr_int("dynamic", 0))
      n = std::max(n.value_or(0), int64_t(double(node.attr_int("dynamic_max_position")) * node.attr_float("dynamic_factor")));
  if (graph.symbols().has("total_sequence_length")) {
    const auto& b = graph.symbols().bounds("total_sequence_length");
    // An explicit bound sets the rows either way: below the context nothing past it is served, above it
    // the user asked for rotary positions past the trained context (tasks::fit_to_context warns), which
    // the component then serves as the recipe says.
    if (b.max) n = *b.max;
  }
  if (!n) bad_input("{}: the ort profile needs max_position_embeddings (the rows of its rotary caches)", f.path.string());
  return *n;
}

namespace {

// Model types onnxruntime-genai dispatches as plain decoder LLMs; others load as "decoder".
bool genai_knows(const std::string& type) {
  for (const char* t : {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "granite", "phi3", "lfm2",
                        "qwen3_5_text", "qwen3_5_moe_text"})
    if (type == t) return true;
  return false;
}

}  // namespace

bool genai_runs_recurrent_state(const std::string& model_type) {
  return model_type == "qwen3_5_text" || model_type == "qwen3_5_moe_text";
}

nlohmann::ordered_json genai_greedy_search(int64_t max_length, bool past_present_share_buffer) {
  return {{"diversity_penalty", 0.0},
          {"do_sample", false},
          {"early_stopping", true},
          {"length_penalty", 1.0},
          {"max_length", max_length},
          {"min_length", 0},
          {"no_repeat_ngram_size", 0},
          {"num_beams", 1},
          {"num_return_sequences", 1},
          {"past_present_share_buffer", past_present_share_buffer},
          {"repetition_penalty", 1.0},
          {"temperature", 1.0},
          {"top_k", 1},
          {"top_p", 1.0}};
}

nlohmann::ordered_json genai_config(const GenaiConfigInput& in) {
  const ir::Graph& g = *in.graph;
  auto has_input = [&](const std::string& name) {
    for (auto id : g.inputs())
      if (g.value(id).name == name) return true;
    return false;
  };
  nlohmann::ordered_json inputs = {{"input_ids", "input_ids"}};
  if (has_input("attention_mask")) inputs["attention_mask"] = "attention_mask";
  if (has_input("position_ids")) inputs["position_ids"] = "position_ids";
  // onnxruntime-genai finds the cache by the decoder name set's patterns (`%d` the layer).
  const tasks::StateNameSet& names = tasks::state_names(tasks::StateNames::Decoder);
  const auto& key = tasks::state_pattern(names, tasks::StateKind::SelfAttentionKey);
  const auto& value = tasks::state_pattern(names, tasks::StateKind::SelfAttentionValue);
  inputs["past_key_names"] = tasks::genai_name_pattern(key.past);
  inputs["past_value_names"] = tasks::genai_name_pattern(value.past);
  nlohmann::ordered_json outputs = {{"logits", "logits"},
                                    {"present_key_names", tasks::genai_name_pattern(key.present)},
                                    {"present_value_names", tasks::genai_name_pattern(value.present)}};
  // Convolution states (LFM2): genai binds them by the same `%d` patterns and sizes them from
  // conv_cache_size; layer_types says which layers hold them.
  const tasks::StatePort* conv = nullptr;
  for (const auto& p : in.state)
    if (p.spec.kind == tasks::StateKind::Convolution && !conv) conv = &p;
  if (conv) {
    const auto& pattern = tasks::state_pattern(*in.names, tasks::StateKind::Convolution);
    inputs["past_conv_names"] = tasks::genai_name_pattern(pattern.past);
    outputs["present_conv_names"] = tasks::genai_name_pattern(pattern.present);
  }
  // Linear-attention states (Qwen3.5's gated delta-net): genai's RecurrentState finds the layers from
  // the graph's inputs by these patterns and sizes each state from its static dims (builders/base.py
  // writes no layer_types for them).
  const tasks::StatePort* recurrent = tasks::first_of_kind(in.state, tasks::StateKind::Recurrent);
  if (recurrent) {
    const auto& pattern = tasks::state_pattern(*in.names, tasks::StateKind::Recurrent);
    inputs["past_recurrent_names"] = tasks::genai_name_pattern(pattern.past);
    outputs["present_recurrent_names"] = tasks::genai_name_pattern(pattern.present);
  }
  const auto& s = in.summary;
  nlohmann::ordered_json eos = nlohmann::ordered_json::array();
  for (auto e : s.eos_token_ids) eos.push_back(e);
  nlohmann::ordered_json eos_value = eos.size() == 1 ? eos[0] : eos;
  const int64_t pad = s.pad_token_id.value_or(s.eos_token_ids.empty() ? 0 : s.eos_token_ids[0]);

  // Search defaults: greedy unless generation_config.json asks for sampling (its values then).
  nlohmann::ordered_json search = genai_greedy_search(in.context_length, in.past_present_share_buffer);
  if (const auto& gen = in.checkpoint->generation_config()) {
    const auto& j = gen->json;
    if (auto v = io::optional_bool(*gen, j, "do_sample")) search["do_sample"] = *v;
    if (auto v = io::optional_number(*gen, j, "temperature")) search["temperature"] = *v;
    if (auto v = io::optional_number(*gen, j, "top_p")) search["top_p"] = *v;
    if (auto v = io::optional_int(*gen, j, "top_k", 0)) search["top_k"] = *v;
    if (auto v = io::optional_number(*gen, j, "repetition_penalty")) search["repetition_penalty"] = *v;
    if (!search["do_sample"].get<bool>()) search["top_k"] = 1;
  }
  const int64_t bos = s.bos_token_id.value_or(s.eos_token_ids.empty() ? 0 : s.eos_token_ids[0]);
  nlohmann::ordered_json model = {
      {"bos_token_id", bos},
      {"context_length", in.context_length},
      {"decoder",
       {{"session_options", {{"log_id", "onnxruntime-genai"}, {"provider_options", nlohmann::ordered_json::array()}}},
        {"filename", in.model_file},
        {"head_size", in.cache.head_dim},
        {"hidden_size", s.hidden_size},
        {"inputs", inputs},
        {"outputs", outputs},
        {"num_attention_heads", s.num_heads},
        {"num_hidden_layers", in.cache.num_layers},
        {"num_key_value_heads", in.cache.num_kv_heads}}},
      {"eos_token_id", eos_value},
      {"pad_token_id", pad},
      {"type", genai_knows(s.model_type) ? s.model_type : std::string("decoder")},
      {"vocab_size", s.vocab_size}};
  if (conv && !recurrent) {  // LFM2's short-convolution layers (builders/lfm2.py)
    nlohmann::ordered_json types = nlohmann::ordered_json::array();
    for (int64_t i = 0; i < in.cache.num_layers; ++i) {
      bool is_conv = false;
      for (const auto& p : in.state) is_conv = is_conv || (p.spec.layer == i && p.spec.kind == tasks::StateKind::Convolution);
      types.push_back(is_conv ? "conv" : "full_attention");
    }
    model["decoder"]["layer_types"] = types;
    model["decoder"]["conv_cache_size"] = conv->spec.shape.back().value;
  }
  return {{"model", model}, {"search", search}};
}

}  // namespace hfx::onnx_backend
