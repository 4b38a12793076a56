#include "runtime/seq2seq_generate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"
#include "runtime/decode_step.h"

namespace hfx::runtime {

namespace {

Tensor i64_tensor(std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  return Tensor::from_vector<int64_t>(DType::I64, std::move(shape), values);
}

// Token ids as a step reads them: i64, or i32 (onnxruntime-genai's Whisper decoder).
Tensor ids_tensor(DType dtype, std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  if (dtype == DType::I64) return i64_tensor(std::move(shape), values);
  HFX_CHECK(dtype == DType::I32, "generate: input_ids of dtype {}", dtype_name(dtype));
  return Tensor::from_vector<int32_t>(DType::I32, std::move(shape), std::vector<int32_t>(values.begin(), values.end()));
}

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The output `name` of a step, which a graph from a file may lack.
Tensor take(std::map<std::string, Tensor>& result, const std::string& name, const char* step) {
  auto it = result.find(name);
  if (it == result.end()) bad_input("generate: the decoder's {} has no `{}` output", step, name);
  return std::move(it->second);
}

}  // namespace

DType input_ids_dtype(const ir::Graph& step) {
  for (auto id : step.inputs())
    if (step.value(id).name == "input_ids") return step.value(id).dtype;
  return DType::I64;
}

Seq2SeqSources text_sources(const std::vector<std::vector<int64_t>>& rows, int64_t pad) {
  if (rows.empty()) bad_input("generate: no prompt given");
  Seq2SeqSources s;
  s.rows = int64_t(rows.size());
  for (const auto& r : rows) {
    if (r.empty()) bad_input("generate: a prompt is empty");
    s.length = std::max<int64_t>(s.length, int64_t(r.size()));
  }
  // Right padding: each source starts at column 0.
  std::vector<int64_t> ids(size_t(s.rows * s.length), pad), mask(size_t(s.rows * s.length), 0);
  for (int64_t b = 0; b < s.rows; ++b)
    for (size_t i = 0; i < rows[size_t(b)].size(); ++i) {
      ids[size_t(b * s.length) + i] = rows[size_t(b)][i];
      mask[size_t(b * s.length) + i] = 1;
    }
  s.mask = i64_tensor({s.rows, s.length}, mask);
  s.encoder_inputs = {{"input_ids", i64_tensor({s.rows, s.length}, ids)}, {"attention_mask", s.mask}};
  return s;
}

Seq2SeqSources speech_sources(Tensor features, int64_t encoder_length) {
  HFX_CHECK(features.rank() == 3 && features.dtype() == DType::F32, "speech features must be f32 [rows, mel, frames]");
  Seq2SeqSources s;
  s.rows = features.dim(0);
  s.length = encoder_length;
  s.encoder_inputs = {{"input_features", std::move(features)}};
  return s;
}

Tensor verify_speech_features(const std::vector<std::vector<int64_t>>& prompts, int64_t mel_bins, int64_t frames) {
  Tensor t(DType::F32, {int64_t(prompts.size()), mel_bins, frames});
  float* out = t.as<float>();
  for (size_t b = 0; b < prompts.size(); ++b) {
    const auto& p = prompts[b];
    HFX_CHECK(!p.empty(), "verify_speech_features: an empty prompt");
    for (int64_t m = 0; m < mel_bins; ++m)
      for (int64_t f = 0; f < frames; ++f)
        *out++ = float(std::sin(0.05 * double(f + 1) * double(m + 1) + 0.3 * double(p[size_t(m + f) % p.size()])));
  }
  return t;
}

Seq2SeqSources prompt_sources(const std::vector<std::vector<int64_t>>& prompts, int64_t pad,
                              const std::optional<SpeechSource>& speech) {
  if (!speech) return text_sources(prompts, pad);
  if (prompts.empty()) bad_input("generate: no prompt given");
  return speech_sources(verify_speech_features(prompts, speech->mel_bins, speech->frames), speech->encoder_length);
}

std::vector<std::vector<int64_t>> generate_seq2seq(const Seq2SeqRunners& r, const CacheSpec& cache,
                                                   const Seq2SeqSources& sources, const std::vector<int64_t>& prompt,
                                                   const SamplingOptions& o,
                                                   const std::function<void(size_t, int64_t)>& on_token,
                                                   const std::function<void(size_t, const float*, int64_t)>& on_scores) {
  const int64_t B = sources.rows;
  HFX_CHECK(!prompt.empty(), "generate: an empty decoder prompt");
  check_state_memory(cache, B, int64_t(prompt.size()) + o.max_new_tokens, sources.length);
  // onnxruntime-genai's encoder names its input audio_features and returns the cross state.
  std::map<std::string, Tensor> encoder_inputs = sources.encoder_inputs;
  if (auto it = encoder_inputs.find("input_features"); it != encoder_inputs.end() && has(r.encoder.input_names(), "audio_features")) {
    encoder_inputs.emplace("audio_features", std::move(it->second));
    encoder_inputs.erase("input_features");
  }
  auto encoded = r.encoder.run(encoder_inputs);
  std::map<std::string, Tensor> past;  // every state's past input, by name
  Tensor hidden;
  if (r.first) {
    hidden = take(encoded, "last_hidden_state", "encoder");
  } else {
    for (const auto& p : cache.states)
      if (p.spec.update == tasks::StateUpdate::Keep) past[p.past] = take(encoded, p.present, "encoder");
      else past[p.past] = Tensor(p.spec.dtype, tasks::state_dims(p.spec, B, 0));  // the first step's empty past
  }
  // A static cache's self-attention buffers start as zeros; every step reads them and writes its tokens
  // at cache_position.
  const int64_t positions = int64_t(prompt.size()) + o.max_new_tokens - 1;  // the last token is never fed
  if (cache.static_cache && positions > cache.max_cache_len)
    bad_input("generate: {} decoder prompt token(s) + {} new tokens need {} cache slots; the export's static cache has "
              "{} (--max-cache-len); use -n {} at most",
              prompt.size(), o.max_new_tokens, positions, cache.max_cache_len,
              std::max<int64_t>(0, cache.max_cache_len - int64_t(prompt.size()) + 1));
  if (cache.static_cache)
    for (const auto& p : cache.states)
      if (p.spec.update == tasks::StateUpdate::WriteAtPosition)
        past[p.past] = Tensor(p.spec.dtype, tasks::state_dims(p.spec, B, cache.max_cache_len));
  StepRunner& first = r.first ? *r.first : r.next;
  const std::vector<std::string> step_inputs = first.input_names();
  const bool masked = std::find(step_inputs.begin(), step_inputs.end(), "encoder_attention_mask") != step_inputs.end();
  if (masked && sources.mask.numel() == 0)
    bad_input("generate: the decoder reads encoder_attention_mask, which a speech source does not have");

  Sampler sampler(o);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  std::vector<bool> done(size_t(B), false);
  const std::set<int64_t> eos(o.eos_token_ids.begin(), o.eos_token_ids.end());
  for (const auto& list : {o.suppress_tokens, o.begin_suppress_tokens})
    for (int64_t t : list) HFX_CHECK(t >= 0, "generate: a suppressed token {} is negative", t);
  std::vector<float> masked_row;
  // The first step reads the whole decoder prompt, every later one the last token.
  std::vector<int64_t> step_ids;
  for (int64_t b = 0; b < B; ++b) step_ids.insert(step_ids.end(), prompt.begin(), prompt.end());
  // A decoder that reads no past (OpenVINO's stateful one) holds its state: it reads the encoder's
  // output on every step, as WhisperPipeline feeds it, and computes the cross state on the first.
  bool holds_state = !cache.states.empty();
  for (const auto& name : r.next.input_names()) holds_state = holds_state && !tasks::find_past(cache.states, name);
  if (holds_state) first.start_over();
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const int64_t seq = step == 0 ? int64_t(prompt.size()) : 1;
    std::map<std::string, Tensor> feed = {{"input_ids", ids_tensor(r.ids, {B, seq}, step_ids)}};
    if (masked) feed["encoder_attention_mask"] = sources.mask;
    if ((step == 0 && r.first) || holds_state) feed["encoder_hidden_states"] = hidden;
    if (!holds_state)  // a growing cache's first step has none yet
      for (const auto& [name, t] : past) feed[name] = t;
    if (cache.static_cache) {
      const int64_t at = step == 0 ? 0 : int64_t(prompt.size()) + step - 1;
      std::vector<int64_t> slots(static_cast<size_t>(seq));
      for (int64_t i = 0; i < seq; ++i) slots[size_t(i)] = at + i;
      feed["cache_position"] = Tensor::from_vector<int64_t>(DType::I64, {seq}, slots);
    }
    auto result = (step == 0 ? first : r.next).run(feed);
    // The self-attention cache grows every step; the cross-attention state comes from the first (or
    // from the encoder).
    for (const auto& p : cache.states)
      if (!holds_state && ((step == 0 && r.first) || p.spec.update != tasks::StateUpdate::Keep))
        past[p.past] = take(result, p.present, step == 0 ? "first step" : "step");
    const Tensor& logits = step_logits(result, B, seq);
    const int64_t V = logits.dim(2);
    for (const auto& list : {o.suppress_tokens, o.begin_suppress_tokens})
      for (int64_t t : list)
        if (t >= V) bad_input("generate: suppressed token {} is outside the logits' vocabulary ({})", t, V);
    for (const auto& t : {o.forced_first_token, o.forced_last_token})
      if (t && (*t < 0 || *t >= V)) bad_input("generate: forced token {} is outside the logits' vocabulary ({})", *t, V);
    step_ids.resize(size_t(B));
    for (int64_t b = 0; b < B; ++b) {
      const float* row = logits.as<float>() + (b * seq + seq - 1) * V;  // the last position's
      if (!o.suppress_tokens.empty() || (step == 0 && !o.begin_suppress_tokens.empty())) {
        // As Transformers' SuppressTokens(AtBegin)LogitsProcessor: -inf, never picked.
        masked_row.assign(row, row + V);
        for (int64_t t : o.suppress_tokens) masked_row[size_t(t)] = -std::numeric_limits<float>::infinity();
        if (step == 0)
          for (int64_t t : o.begin_suppress_tokens) masked_row[size_t(t)] = -std::numeric_limits<float>::infinity();
        row = masked_row.data();
      }
      // ForcedBOS / ForcedEOSTokenLogitsProcessor: the first new token after a one-token prompt, the
      // last max_new_tokens allows.
      if (on_scores && !done[size_t(b)]) on_scores(size_t(b), row, V);
      std::optional<int64_t> forced;
      if (step == 0 && prompt.size() == 1) forced = o.forced_first_token;
      if (step == o.max_new_tokens - 1 && o.forced_last_token) forced = o.forced_last_token;
      const int64_t tok = done[size_t(b)] ? o.pad_token_id : forced ? *forced : sampler.pick(row, V);
      step_ids[size_t(b)] = tok;
      out[size_t(b)].push_back(tok);
      if (done[size_t(b)]) continue;
      if (on_token) on_token(size_t(b), tok);
      if (eos.count(tok)) done[size_t(b)] = true;
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
  }
  return out;
}

}  // namespace hfx::runtime
