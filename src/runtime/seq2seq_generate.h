// The decode loop of an encoder-decoder (tasks/seq2seq.h): the encoder run once over the source rows
// (right-padded, as their tokenizers pad), the decoder's first step from decoder_start_token_id over
// the encoder's output, then one token per step over the carried self-attention cache and the
// cross-attention keys/values the first step returned. Greedy by default, sampling as generate();
// a row that emits EOS is padded with pad_token_id until every row has finished, as Transformers'
// generate() does.
#pragma once
#include <functional>
#include <vector>

#include "runtime/generate.h"

namespace hfx::runtime {

struct Seq2SeqRunners {
  StepRunner& encoder;
  StepRunner& first;  // the decoder's first step (reads encoder_hidden_states)
  StepRunner& next;   // every later step (reads the carried state)
};

// Returns, per source row, the generated tokens (without the start token).
std::vector<std::vector<int64_t>> generate_seq2seq(const Seq2SeqRunners& runners, const CacheSpec& cache,
                                                   const std::vector<std::vector<int64_t>>& sources,
                                                   int64_t decoder_start_token_id, const SamplingOptions& options,
                                                   const std::function<void(size_t row, int64_t token)>& on_token = {});

}  // namespace hfx::runtime
