// What every architecture definition provides: a `Model` exposing modules (a decoder, an encoder;
// next a vision tower, a projector), each a typed interface with a summary (for `inspect` and the
// manifest), its hyper-parameters and a build hook that emits canonical IR for one forward step.
// Tasks (src/tasks) own the graph I/O: they ask the model for the modules they need, create the
// inputs, call build(), and name the outputs by the contract.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint.h"
#include "ir/builder.h"
#include "ir/model_summary.h"
#include "ir/state.h"

namespace hfx::models {

// Inputs of one causal-LM step, created by the task.
struct CausalLmInputs {
  ir::ValueId input_ids = ir::kNone;       // i64 [batch, seq]
  ir::ValueId attention_mask = ir::kNone;  // i64 [batch, past + seq]
  ir::ValueId position_ids = ir::kNone;    // i64 [batch, seq]
  // Per layer [batch, kv_heads, past, head_dim]; empty for a graph that always starts from an empty
  // cache (prefill). With a static cache they are [batch, kv_heads, max_cache_len, head_dim] buffers
  // and cache_position (i64 [seq]) says which slots this step writes.
  // Indexed by layer: a hybrid's layers without attention hold kNone (and those without a
  // convolution kNone in past_conv, [batch, channels, kernel - 1] where there is one; past_ssm holds
  // a state-space layer's scan state [batch, heads, head_dim, state_size]).
  std::vector<ir::ValueId> past_key, past_value, past_conv, past_ssm;
  ir::ValueId cache_position = ir::kNone;
};

struct CausalLmOutputs {
  ir::ValueId logits = ir::kNone;  // f32 [batch, seq, vocab]
  // Indexed by layer, as the inputs (kNone where the layer carries no such state).
  std::vector<ir::ValueId> present_key, present_value, present_conv, present_ssm;
};

// How the task lays out the state a step carries: the key/value cache growing (its length the
// symbol `length`) or in fixed buffers of max_cache_len.
struct StateLayout {
  bool static_cache = false;
  int64_t max_cache_len = 0;
  std::string length = "past_sequence_length";
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

// Layer `layer`'s attention key and value (kv_heads x head_dim, laid out as `layout` says): the states
// of one attention layer among others (a hybrid's, or a layer that carries a mixer's states as well).
std::vector<ir::StateSpec> attention_layer_states(int64_t layer, int64_t kv_heads, int64_t head_dim,
                                                  const StateLayout& layout);
// A hybrid's state: per layer, an attention layer's key and value (kv_heads x head_dim, laid out
// as `layout` says) or the layer's own states (`own(i)`: a convolution's, a scan's).
std::vector<ir::StateSpec> hybrid_states(const std::vector<bool>& is_attention, int64_t kv_heads, int64_t head_dim,
                                         const StateLayout& layout,
                                         const std::function<std::vector<ir::StateSpec>(int64_t)>& own);

class CausalLm {
 public:
  virtual ~CausalLm() = default;
  virtual const ModelSummary& summary() const = 0;
  virtual CacheGeometry cache() const = 0;
  // The state one step carries, per layer (tasks turn it into ports). By default every layer's
  // key/value cache from cache(); a hybrid declares its own (LFM2: convolution states beside it).
  virtual std::vector<ir::StateSpec> states(const StateLayout& layout) const;
  // The client name set its state ports are named by (tasks/state_names.h: "decoder", "js-hybrid").
  virtual std::string_view state_names() const { return "decoder"; }
  // Emits the graph for one step. Weights are bound lazily from the checkpoint (no copies).
  virtual CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const = 0;
};

class Encoder;    // models/encoder.h
class Seq2SeqLm;  // models/seq2seq.h

// The parts of a model a task may ask for. A seq2seq model will expose an encoder and a decoder with
// cross-attention, a vision-language model a vision tower, a projector and a decoder.
enum class ModuleKind { Decoder, Encoder, Seq2Seq };
// "a decoder", "an encoder": for messages.
std::string_view module_name(ModuleKind kind);

// One loaded architecture definition, the single owner of its modules (each keeps a reference to the
// checkpoint it binds its weights from). A task asks only for the modules it declared it needs.
class Model {
 public:
  explicit Model(std::unique_ptr<CausalLm> decoder);
  explicit Model(std::unique_ptr<Encoder> encoder);
  explicit Model(std::unique_ptr<Seq2SeqLm> seq2seq);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  // The model's summary: its one module's, while every model has one.
  const ModelSummary& summary() const;
  bool exposes(ModuleKind kind) const;
  std::vector<ModuleKind> modules() const;
  // Internal error when the model does not expose the module (check exposes() first).
  const CausalLm& decoder() const;
  const Encoder& encoder() const;
  const Seq2SeqLm& seq2seq() const;

 private:
  std::unique_ptr<CausalLm> decoder_;
  std::unique_ptr<Encoder> encoder_;
  std::unique_ptr<Seq2SeqLm> seq2seq_;
};

}  // namespace hfx::models
