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
};

// A symbol's upper (or lower) bound in the graph's contract, if it has one.
std::optional<int64_t> bound(const ir::Graph& g, const std::string& sym, bool upper);

// Representative shapes and the contract's bounds: batch min and max; sequence 1, mid and max; cache
// empty, partial and near full. Unbounded dims use small stand-ins (batch 2, sequence 8, cache 16).
// `chunked_batches` false: a chunk of several tokens on a non-empty cache runs at batch 1 only (ONNX
// Runtime's GroupQueryAttention, the ort profile, rejects it for batch > 1).
std::vector<ShapeCase> shape_matrix(const ir::Graph& g, const std::string& role, const runtime::CacheSpec& cache,
                                    bool full, bool chunked_batches);

// `in` restricted to the graph's inputs.
std::map<std::string, Tensor> own_inputs(const ir::Graph& g, std::map<std::string, Tensor> in);

// Step inputs for a component at one shape: row 0 unpadded, later rows left-padded by 2 per row.
std::map<std::string, Tensor> make_inputs(const ir::Graph& g, const ShapeCase& c, const runtime::CacheSpec& cache,
                                          int64_t vocab, uint64_t seed);

// A case for an artifact that keeps its cache as state: the cache is filled by really running the
// first `past` tokens. Returns the inputs of that first step (nullopt when past is 0) and sets `step`
// to the second step's inputs, whose past_key_values.* are the reference's present.* after the first
// step, so the reference runs the step exactly as the state holder does.
std::optional<std::map<std::string, Tensor>> stateful_case(const ir::Graph& ref, const ShapeCase& c,
                                                           const runtime::CacheSpec& cache, int64_t vocab, uint64_t seed,
                                                           std::map<std::string, Tensor>& step);

}  // namespace hfx::pipeline
