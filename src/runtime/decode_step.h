// What hfx's decode loops share (runtime/generate.h for decoders, runtime/seq2seq_generate.h for
// encoder-decoders): picking a token from a row of logits, checking a step's logits, and sizing the
// state a loop will hold against the machine's memory before anything is allocated.
#pragma once
#include <cstdint>
#include <map>
#include <random>
#include <string>

#include "core/tensor.h"
#include "runtime/generate.h"

namespace hfx::runtime {

// Picks the next token from one row of logits.
class Sampler {
 public:
  explicit Sampler(const SamplingOptions& o) : o_(o), rng_(o.seed) {}
  // Greedy (the first max, as torch.argmax), or temperature / top-k / top-p sampling.
  int64_t pick(const float* logits, int64_t vocab);

 private:
  SamplingOptions o_;
  std::mt19937_64 rng_;
};

// The step's `logits`, which must be f32 [rows, seq, vocab] (the step graph may come from a file).
const Tensor& step_logits(const std::map<std::string, Tensor>& result, int64_t rows, int64_t seq);

// BadInput when the states of `cache` for `rows` rows at their longest would not fit in the memory
// available: `longest` positions (a growing or static cache's), `source` for a state kept at the
// encoder's length. The geometry comes from an export's manifest, which whoever shipped it wrote
// (hostile-input D5): checked in doubles, before anything is allocated.
void check_state_memory(const CacheSpec& cache, int64_t rows, int64_t longest, int64_t source);

}  // namespace hfx::runtime
