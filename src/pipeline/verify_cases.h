// The inputs `hfx verify` runs a component on: the shape matrix at the contract's bounds, random
// step inputs with left padding, and for an artifact that keeps its cache as state (OpenVINO's
// stateful decoder) the two steps that fill it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "runtime/generate.h"

namespace hfx::pipeline {

// One step's shapes: which rows, how many new tokens, how much is already cached.
struct ShapeCase {
  std::string name;
  int64_t batch, seq, past;
  int64_t positions() const { return batch * (seq + past); }  // its size, for lockstep groups
};

// Cases run in lockstep (runtime::Executor::run_many: each weight read once for the group), as
// [begin, end) ranges of consecutive indices whose sizes (batch x (sequence + past): positions, each
// with a row of logits alive until the group ends) sum to at most `budget`; a larger case runs alone.
std::vector<std::pair<size_t, size_t>> lockstep_groups(const std::vector<int64_t>& sizes, int64_t budget = 256);

// A symbol's upper (or lower) bound in the graph's contract, if it has one.
std::optional<int64_t> bound(const ir::Graph& g, const std::string& sym, bool upper);

// The contract's bounds a step must stay inside (absent: unbounded; mins default as tasks/causal_lm
// declares them).
struct StepBounds {
  int64_t batch_min = 1, seq_min = 1, past_min = 0, total_min = 1;
  std::optional<int64_t> batch_max, seq_max, past_max, total_max;
};
StepBounds step_bounds(const std::map<std::string, SymbolBounds>& dims);  // a recipe's dims
StepBounds step_bounds(const ir::Graph& g);
// The tightest bounds over several graphs (a split export: prefill bounds the prompt, decode the cache).
StepBounds step_bounds(const std::vector<const ir::Graph*>& graphs);

// Representative shapes and the contract's bounds: batch min and max; sequence 1, mid and max; cache
// empty, partial and near full. Unbounded dims use small stand-ins (batch 2, sequence 8, cache 16).
// Every case is moved inside the contract's bounds (past + sequence within total_sequence_length's);
// one that cannot be is left out and named in `skipped` with the reason.
// `chunked_batches` false: a chunk of several tokens on a non-empty cache runs at batch 1 only (ONNX
// Runtime's GroupQueryAttention, the ort profile, rejects it for batch > 1).
std::vector<ShapeCase> shape_matrix(const ir::Graph& g, const std::string& role, const runtime::CacheSpec& cache,
                                    bool full, bool chunked_batches, std::vector<std::string>* skipped = nullptr);

// The greedy check's prompts and token count inside the contract: prompts of up to 7 tokens within
// sequence_length, prompt + new tokens within total_sequence_length (or the static cache), a batch of
// 2 (the second row left-padded) where batch_size allows it, or batch_size's min. `tokens` is the
// count wanted; returns the prompts and sets `tokens` to the count that fits (at least 1).
std::vector<std::vector<int64_t>> greedy_prompts(const StepBounds& b, const runtime::CacheSpec& cache, int64_t vocab,
                                                 bool batched, int64_t& tokens);

// The reference's greedy tokens for `prompts`, found by teacher forcing on the artifact's `tokens`:
// one run of the first step graph (`first`: the decoder or prefill graph) per row, at batch 1, over the
// prompt and the row's tokens, reading the argmax at every generated position. When each argmax is the
// artifact's token (up to and including the row's first EOS, padding after it), the reference's own
// greedy decode gives exactly these tokens: one pass over the weights (the rows' runs in lockstep with
// the reference's shape cases) instead of one per token. Otherwise the caller decodes the reference
// step by step.
struct TeacherForcing {
  std::vector<size_t> rows;                          // the prompts with a real token to check
  std::vector<std::map<std::string, Tensor>> inputs;  // per row: prompt + tokens, batch 1, empty cache
  std::vector<int64_t> lengths;                      // per row: its sequence length
  std::vector<size_t> real;                          // per prompt: its real tokens (through its first EOS)
};

// The runs, or nullopt when teacher forcing cannot stand for decoding: the rows' lengths are not those
// generate() gives, sampling is on, or prompt and tokens do not fit the contract's bounds in one step.
std::optional<TeacherForcing> teacher_forcing(const ir::Graph& first, const runtime::CacheSpec& cache, int64_t vocab,
                                              const std::vector<std::vector<int64_t>>& prompts,
                                              const std::vector<std::vector<int64_t>>& tokens,
                                              const runtime::SamplingOptions& sampling);

// `tokens` when every argmax of the runs' `outputs` is the artifact's token; nullopt where the paths part.
std::optional<std::vector<std::vector<int64_t>>> teacher_forced_tokens(
    const TeacherForcing& tf, const std::vector<std::map<std::string, Tensor>>& outputs, int64_t vocab,
    const std::vector<std::vector<int64_t>>& prompts, const std::vector<std::vector<int64_t>>& tokens);

// `in` restricted to the graph's inputs.
std::map<std::string, Tensor> own_inputs(const ir::Graph& g, std::map<std::string, Tensor> in);

// Step inputs for a component at one shape: row 0 unpadded, later rows left-padded by 2 per row;
// with `padding_in_past_only`, by no more than the past holds, so every query of the step is real.
std::map<std::string, Tensor> make_inputs(const ir::Graph& g, const ShapeCase& c, const runtime::CacheSpec& cache,
                                          int64_t vocab, uint64_t seed, bool padding_in_past_only = false);

// A case for an artifact that keeps its cache as state: the cache is filled by really running the
// first `past` tokens. Returns the inputs of that first step (nullopt when past is 0) and sets `step`
// to the second step's inputs, whose state inputs are the reference's state outputs after the first
// step, so the reference runs the step exactly as the state holder does.
std::optional<std::map<std::string, Tensor>> stateful_case(const ir::Graph& ref, const ShapeCase& c,
                                                           const runtime::CacheSpec& cache, int64_t vocab, uint64_t seed,
                                                           std::map<std::string, Tensor>& step);

// Where a failing case differs, from its measurements alone (a pure function, unit-tested):
// `outputs` holds each compared output's largest difference, `layers` each decoder layer's output
// difference when the graphs expose it (empty: not exposed). It names the outputs over tolerance, the
// first layer whose output diverges, and blames the final norm or lm_head only when the logits are
// what differs and every layer's output, the last one's included, agrees.
struct OutputDiff {
  std::string name;
  double max_abs = 0;
};
struct LayerDiff {
  double max_abs = 0, mean_abs = 0;
};
// `states`: the contract's state ports, whose present outputs are the caches a layer writes.
std::string diagnose_divergence(const std::vector<OutputDiff>& outputs, const std::vector<LayerDiff>& layers, double atol,
                                const std::vector<tasks::StatePort>& states);

}  // namespace hfx::pipeline
