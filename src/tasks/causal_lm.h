// The causal-LM task: fixes the graph I/O of decoder steps to the contract that Optimum,
// onnxruntime-genai and transformers.js load, and decomposes generation into components.
//
//   input_ids       [batch_size, sequence_length] i64
//   attention_mask  [batch_size, total_sequence_length] i64          (static: [batch_size, N])
//   position_ids    [batch_size, sequence_length] i64
//   past_key_values.{i}.key|value [batch_size, kv_heads, past_sequence_length, head_dim]
//                                                                     (static: [.., N, ..])
//   cache_position  [sequence_length] i64                              (static cache only)
//   -> logits [batch_size, sequence_length, vocab] f32
//      present.{i}.key|value [batch_size, kv_heads, total_sequence_length, head_dim]
//                                                                     (static: the updated buffers)
// total_sequence_length = past_sequence_length + sequence_length.
//
// Components: by default one `decoder` graph whose query axis is symbolic (prompt on an empty cache,
// single-token steps and multi-token chunks). With split_prefill: a `prefill` graph (no past inputs;
// with a static cache, writing the buffers) and a `decode` graph whose query length is 1.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "models/model.h"

namespace hfx::tasks {

struct IoSpec {
  std::string name;
  DType dtype;
  Shape shape;
};

struct Component {
  std::string role;       // decoder | prefill | decode
  std::string file_stem;  // model | prefill | decode
  ir::Graph graph;
  std::vector<IoSpec> inputs, outputs;
  // (input, output) pairs a runtime may bind to one buffer: the static cache's in-place update.
  std::vector<std::pair<std::string, std::string>> shared_buffers;
};

// The longest static cache (--max-cache-len) an export accepts: 2^24 tokens, past every released
// model's context (Llama 4 Scout: 10,485,760).
inline constexpr int64_t kMaxCacheLen = int64_t(1) << 24;

struct CausalLmOptions {
  bool split_prefill = false;
  bool static_cache = false;
  int64_t max_cache_len = 0;  // static cache length N (required with static_cache)
  bool dynamic = false;       // all dims symbolic and unbounded
  // Bounds by dim name (batch_size, sequence_length, past_sequence_length, total_sequence_length).
  std::map<std::string, SymbolBounds> dims;
};

// Names of the symbolic dims a causal-LM contract uses.
const std::vector<std::string>& causal_lm_dim_names();

// Throws BadInput for inconsistent options (unknown dim, min > max, static cache without length).
void validate(const CausalLmOptions& options);

std::vector<Component> build_causal_lm(const models::CausalLm& model, const CausalLmOptions& options);

}  // namespace hfx::tasks
