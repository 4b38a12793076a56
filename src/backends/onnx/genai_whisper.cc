#include "backends/onnx/genai_whisper.h"

#include "backends/onnx/ort_profile.h"
#include "io/json_fields.h"
#include "tasks/state_names.h"

namespace hfx::onnx_backend {

namespace {

using tasks::StateKind;

std::string past_of(StateKind kind) {
  return tasks::genai_name_pattern(tasks::state_pattern(tasks::state_names(tasks::StateNames::GenaiWhisper), kind).past);
}
std::string present_of(StateKind kind) {
  return tasks::genai_name_pattern(tasks::state_pattern(tasks::state_names(tasks::StateNames::GenaiWhisper), kind).present);
}

nlohmann::ordered_json session_options() {
  return {{"log_id", "onnxruntime-genai"}, {"provider_options", nlohmann::ordered_json::array()}};
}

}  // namespace

nlohmann::ordered_json genai_whisper_config(const GenaiWhisperInput& in) {
  const auto& s = in.summary;
  const io::JsonFile& cfg = in.checkpoint->config();
  // The encoder's own geometry (genai sizes nothing from it, the builder records it all the same).
  const int64_t encoder_layers = io::optional_int(cfg, cfg.json, "encoder_layers", 1).value_or(in.decoder_layers);
  const int64_t encoder_heads = io::optional_int(cfg, cfg.json, "encoder_attention_heads", 1).value_or(in.decoder_heads);
  nlohmann::ordered_json encoder = {
      {"session_options", session_options()},
      {"filename", in.encoder_file},
      {"head_size", s.hidden_size / encoder_heads},
      {"hidden_size", s.hidden_size},
      {"inputs", {{"audio_features", "audio_features"}}},
      {"outputs",
       {{"encoder_hidden_states", "hidden_states"},
        {"cross_present_key_names", present_of(StateKind::CrossAttentionKey)},
        {"cross_present_value_names", present_of(StateKind::CrossAttentionValue)}}},
      {"num_attention_heads", encoder_heads},
      {"num_hidden_layers", encoder_layers},
      {"num_key_value_heads", encoder_heads}};
  // genai sizes the self and cross caches from these: [batch, num_attention_heads, length, head_size].
  nlohmann::ordered_json decoder = {
      {"session_options", session_options()},
      {"filename", in.decoder_file},
      {"head_size", in.head_dim},
      {"hidden_size", s.hidden_size},
      {"inputs",
       {{"input_ids", "input_ids"},
        {"past_key_names", past_of(StateKind::SelfAttentionKey)},
        {"past_value_names", past_of(StateKind::SelfAttentionValue)},
        {"cross_past_key_names", past_of(StateKind::CrossAttentionKey)},
        {"cross_past_value_names", past_of(StateKind::CrossAttentionValue)}}},
      {"outputs",
       {{"logits", "logits"},
        {"present_key_names", present_of(StateKind::SelfAttentionKey)},
        {"present_value_names", present_of(StateKind::SelfAttentionValue)}}},
      {"num_attention_heads", in.decoder_heads},
      {"num_hidden_layers", in.decoder_layers},
      {"num_key_value_heads", in.decoder_heads}};
  nlohmann::ordered_json eos = nlohmann::ordered_json::array();
  for (auto e : s.eos_token_ids) eos.push_back(e);
  const int64_t first_eos = s.eos_token_ids.empty() ? 0 : s.eos_token_ids[0];
  nlohmann::ordered_json model = {
      {"bos_token_id", s.bos_token_id.value_or(first_eos)},
      {"context_length", in.context_length},
      {"decoder", decoder},
      {"decoder_start_token_id", in.decoder_start_token_id},
      {"encoder", encoder},
      {"eos_token_id", eos.size() == 1 ? eos[0] : eos},
      {"pad_token_id", s.pad_token_id.value_or(first_eos)},
      {"type", "whisper"},
      {"vocab_size", s.vocab_size}};
  // Greedy, as Transformers' Whisper generate() decodes by default; the caches grow by concatenation.
  nlohmann::ordered_json search = genai_greedy_search(in.context_length, false);
  return {{"model", model}, {"search", search}};
}

nlohmann::ordered_json genai_whisper_audio_processor(int64_t mel_bins) {
  auto op = [](const char* name, const char* type, nlohmann::ordered_json attrs) {
    nlohmann::ordered_json o = {{"name", name}, {"type", type}};
    if (!attrs.is_null()) o["attrs"] = std::move(attrs);
    return nlohmann::ordered_json{{"operation", o}};
  };
  nlohmann::ordered_json sequence = nlohmann::ordered_json::array();
  sequence.push_back(op("audio_decoder", "AudioDecoder", nullptr));
  sequence.push_back(op("STFT", "STFTNorm", {{"n_fft", 400}, {"frame_length", 400}, {"hop_length", 160}}));
  sequence.push_back(op("log_mel_spectrogram", "LogMelSpectrum",
                        {{"chunk_size", 30}, {"hop_length", 160}, {"n_fft", 400}, {"n_mel", mel_bins}}));
  return {{"feature_extraction", {{"sequence", sequence}}}};
}

}  // namespace hfx::onnx_backend
