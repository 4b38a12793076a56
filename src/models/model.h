// What every architecture definition provides: a typed summary (for `inspect` and the manifest) and
// a build hook that emits canonical IR for one forward step. Tasks (src/tasks) own the graph I/O:
// they create the inputs, call build(), and name the outputs by the contract.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "ir/builder.h"
#include "ir/model_summary.h"

namespace hfx::models {

// Inputs of one causal-LM step, created by the task.
struct CausalLmInputs {
  ir::ValueId input_ids = ir::kNone;       // i64 [batch, seq]
  ir::ValueId attention_mask = ir::kNone;  // i64 [batch, past + seq]
  ir::ValueId position_ids = ir::kNone;    // i64 [batch, seq]
  // Per layer [batch, kv_heads, past, head_dim]; empty for a graph that always starts from an empty
  // cache (prefill). With a static cache they are [batch, kv_heads, max_cache_len, head_dim] buffers
  // and cache_position (i64 [seq]) says which slots this step writes.
  std::vector<ir::ValueId> past_key, past_value;
  ir::ValueId cache_position = ir::kNone;
};

struct CausalLmOutputs {
  ir::ValueId logits = ir::kNone;  // f32 [batch, seq, vocab]
  std::vector<ir::ValueId> present_key, present_value;
};

// Declared in ir/ (model_summary.h) so that formats can read them without models/; named here too,
// as every definition and task spells them.
using ir::CacheGeometry;
using ir::ModelSummary;

// The summary fields every definition fills the same way from its typed config (any config struct
// with these member names).
template <typename Config>
ModelSummary summary_of(const Config& c, std::string model_type, std::string hf_class) {
  ModelSummary s;
  s.model_type = std::move(model_type);
  s.hf_class = std::move(hf_class);
  s.vocab_size = c.vocab_size;
  s.hidden_size = c.hidden_size;
  s.num_layers = c.num_layers;
  s.num_heads = c.num_heads;
  s.eos_token_ids = c.eos_token_ids;
  s.bos_token_id = c.bos_token_id;
  s.pad_token_id = c.pad_token_id;
  return s;
}

class CausalLm {
 public:
  virtual ~CausalLm() = default;
  virtual const ModelSummary& summary() const = 0;
  virtual CacheGeometry cache() const = 0;
  // Emits the graph for one step. Weights are bound lazily from the checkpoint (no copies).
  virtual CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const = 0;
};

}  // namespace hfx::models
