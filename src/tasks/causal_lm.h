// The causal-LM task: fixes the graph I/O of decoder steps to the contract that Optimum,
// onnxruntime-genai and transformers.js load, and decomposes generation into components.
//
//   input_ids       [batch_size, sequence_length] i64
//   attention_mask  [batch_size, total_sequence_length] i64          (static: [batch_size, N])
//   position_ids    [batch_size, sequence_length] i64
//   per layer a key and a value state, read [batch_size, kv_heads, past_sequence_length, head_dim]
//                                                                     (static: [.., N, ..])
//   cache_position  [sequence_length] i64                              (static cache only)
//   -> logits [batch_size, sequence_length, vocab] f32
//      the states returned [batch_size, kv_heads, total_sequence_length, head_dim]
//                                                                     (static: the updated buffers)
// total_sequence_length = past_sequence_length + sequence_length. The state is the contract's
// (tasks/state.h: kv_cache_states), its ports named as decoder clients load them (tasks/state_names.h).
//
// Components: by default one `decoder` graph whose query axis is symbolic (prompt on an empty cache,
// single-token steps and multi-token chunks). With split_prefill: a `prefill` graph (no past inputs;
// with a static cache, writing the buffers) and a `decode` graph whose query length is 1.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/json_fields.h"
#include "models/model.h"
#include "tasks/component.h"

namespace hfx::tasks {

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
  // An encoder-decoder's graphs: "optimum" (encoder_model + decoder_model + decoder_with_past_model +
  // decoder_model_merged) or "genai" (onnxruntime-genai's Whisper: encoder + decoder). Not a recipe
  // field of its own: the ONNX format's `onnx_layout` option sets it (pipeline::task_options).
  std::string seq2seq_layout = "optimum";
};

// Names of the symbolic dims a causal-LM contract uses.
const std::vector<std::string>& causal_lm_dim_names();

// Throws BadInput for inconsistent options: an unknown dim, min > max, a step dim with min 0, bounds
// that total_sequence_length = past_sequence_length + sequence_length makes contradictory (a max no
// step can reach), a static cache without length.
void validate(const CausalLmOptions& options);

// The positions a model was trained for: max_position_embeddings (GPT-2's n_positions). `learned`: the
// positions are rows of a table (GPT-2, GPT-BigCode), so none exists past it; otherwise they are
// rotary and extrapolate, as Transformers runs them. nullopt when the config names none, or the rope
// is dynamic NTK (built to run past them). `field` names the config field, for messages.
struct ContextLimit {
  int64_t positions = 0;
  std::string field;
  bool learned = false;
};
std::optional<ContextLimit> model_context(const io::JsonFile& config, const std::vector<Component>& built);

// One rule for bounds past the model's context (docs/verify.md, "Bounds"): each is warned about; with
// rotary positions it is kept (Transformers runs past max_position_embeddings, the model was just not
// trained there), with a learned position table it is lowered to the table's rows (total_sequence_length,
// sequence_length and a static cache's max_cache_len to the positions, past_sequence_length to one
// less) and a min past the table is refused. Returns the warnings; the recipe and the components then
// record the bound actually used.
std::vector<std::string> fit_to_context(CausalLmOptions& options, const ContextLimit& limit);

std::vector<Component> build_causal_lm(const models::CausalLm& model, const CausalLmOptions& options);

class Task;  // tasks/task.h
// The causal-LM task: needs a decoder, generative (the task registry, tasks/task.h, lists it).
const Task& causal_lm_task();

}  // namespace hfx::tasks
