// The rules of an encoder-decoder's generation_config.json that hfx's decode loop applies as
// Transformers' generate() does with greedy search:
//   Whisper   how its generate() starts and constrains a transcription
//             (WhisperGenerationMixin._retrieve_init_tokens and the logits processors it adds): the
//             decoder prompt <|startoftranscript|> [language] [task] [<|notimestamps|>], and the
//             tokens it never emits (suppress_tokens) or never emits first (begin_suppress_tokens);
//   text      forced_bos_token_id (mBART-50's target language), forced_eos_token_id (BART, Marian: EOS
//             as the last token when max_new_tokens runs out) and single-token bad_words_ids (Marian's
//             pad), the processors greedy search adds for them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/generate.h"

namespace hfx::runtime {

struct WhisperDecoding {
  std::vector<int64_t> prompt;
  std::vector<int64_t> suppress_tokens;        // masked at every step
  std::vector<int64_t> begin_suppress_tokens;  // masked at the first generated token
};

// Single-token bad_words_ids as suppressed tokens, forced_bos_token_id and forced_eos_token_id, into
// `options`. A bad word of several tokens (banned only after its prefix) is refused: hfx does not
// apply it. BadInput naming the file and key for an id outside the vocabulary.
void apply_text_generation_rules(const nlohmann::json& generation_config, const std::string& file, int64_t vocab_size,
                                 SamplingOptions& options);

// `generation_config`: the export's generation_config.json (an empty object when it has none).
// `language`: a code ("en") or token ("<|en|>") of generation_config's lang_to_id; `task`: "transcribe"
// or "translate" (task_to_id). Timestamps are off: <|notimestamps|> ends the prompt when the config
// names one. Without a language, the config's forced_decoder_ids give it (older configs); a
// multilingual config that leaves it open asks for --language (hfx does not detect the language).
// BadInput naming the file and key for a language, task or id the config does not have.
WhisperDecoding whisper_decoding(const nlohmann::json& generation_config, const std::string& file, int64_t start,
                                 const std::optional<std::string>& language, const std::optional<std::string>& task,
                                 int64_t vocab_size);

}  // namespace hfx::runtime
