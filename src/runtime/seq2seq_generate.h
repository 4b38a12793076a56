// The decode loop of an encoder-decoder (tasks/seq2seq.h): the encoder run once over the source rows
// (token ids right-padded, as their tokenizers pad, or speech features), the decoder's first step from
// the decoder prompt (decoder_start_token_id, then any forced tokens) over
// the encoder's output, then one token per step over the carried self-attention cache and the
// cross-attention keys/values the first step returned. Greedy by default, sampling as generate();
// a row that emits EOS is padded with pad_token_id until every row has finished, as Transformers'
// generate() does.
#pragma once
#include <functional>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/generate.h"

namespace hfx::runtime {

struct Seq2SeqRunners {
  StepRunner& encoder;
  // The decoder's first step (reads encoder_hidden_states); null when the encoder returns the cross
  // state itself (onnxruntime-genai's layout): `next` then runs the first step from an empty past.
  StepRunner* first;
  StepRunner& next;  // every later step (reads the carried state)
  DType ids = DType::I64;  // the steps' input_ids (genai's layout: i32)
};
// The dtype of a step graph's input_ids.
DType input_ids_dtype(const ir::Graph& step);

// The source rows as the encoder reads them.
struct Seq2SeqSources {
  std::map<std::string, Tensor> encoder_inputs;  // input_ids + attention_mask, or input_features
  Tensor mask;          // i64 [rows, length]: a text source's padding, which decoder steps read; empty for speech
  int64_t rows = 0;
  int64_t length = 0;   // the encoder's output positions (sizes the cross state)
};
// Token rows, right-padded with `pad` (as their tokenizers pad).
Seq2SeqSources text_sources(const std::vector<std::vector<int64_t>>& rows, int64_t pad);
// Log-mel features f32 [rows, mel_bins, frames] of a speech encoder whose output has `encoder_length`
// positions.
Seq2SeqSources speech_sources(Tensor features, int64_t encoder_length);
// The features verify and the export's check feed a speech encoder for greedy prompt `prompt` (token
// ids, which a speech model's check has no use for as text): feature [m, t] = f32(sin(0.05 (t + 1)
// (m + 1) + 0.3 prompt[(m + t) mod n])) in double, so that python/hfx_ort_seq2seq.py's
// verify_speech_features, the Transformers oracle's, computes the same bits. A deterministic
// non-periodic input whose rows differ by prompt; [rows, mel_bins, frames].
Tensor verify_speech_features(const std::vector<std::vector<int64_t>>& prompts, int64_t mel_bins, int64_t frames);

// A speech encoder's input (Whisper's): log-mel features [batch, mel_bins, frames], encoded into
// encoder_length positions. From the manifest (model.speech_source).
struct SpeechSource {
  int64_t mel_bins = 0, frames = 0, encoder_length = 0;
};

// The sources of greedy prompts: the prompts as text (right-padded with `pad`), or for a speech model
// their verify_speech_features.
Seq2SeqSources prompt_sources(const std::vector<std::vector<int64_t>>& prompts, int64_t pad,
                              const std::optional<SpeechSource>& speech);

// Returns, per source row, the generated tokens (after the decoder prompt). `decoder_prompt`: the tokens
// every row's decoding starts from (decoder_start_token_id; Whisper's language and task tokens after it).
// `on_scores` sees each unfinished row's scores (vocab of them, suppressed tokens at -inf) before its
// token is picked: verify reads the reference's margin at a near-tie from them.
std::vector<std::vector<int64_t>> generate_seq2seq(const Seq2SeqRunners& runners, const CacheSpec& cache,
                                                   const Seq2SeqSources& sources,
                                                   const std::vector<int64_t>& decoder_prompt,
                                                   const SamplingOptions& options,
                                                   const std::function<void(size_t row, int64_t token)>& on_token = {},
                                                   const std::function<void(size_t row, const float* scores, int64_t vocab)>& on_scores = {});

}  // namespace hfx::runtime
