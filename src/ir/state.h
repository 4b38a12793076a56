// What a step graph carries from one call to the next, typed per layer (llama.cpp's memory kinds,
// mobius's hybrid cache inputs): a self-attention key or value, a cross-attention key or value, a
// convolution state or a recurrent (SSM) state, with its dtype, its shape and how a step updates it.
// Plain data in ir/ so that a model declares its StateSpecs (models/model.h, CausalLm::states) and
// a format reads them without models/; tasks name them by a client's name set (tasks/state_names.h);
// the decode loop, verify's step inputs, the manifest, the artifact read-back and the backends read
// the state from that list, never from port names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace hfx::ir {

enum class StateKind { SelfAttentionKey, SelfAttentionValue, CrossAttentionKey, CrossAttentionValue, Convolution, Recurrent };
inline constexpr StateKind kStateKinds[] = {StateKind::SelfAttentionKey,   StateKind::SelfAttentionValue,
                                            StateKind::CrossAttentionKey,  StateKind::CrossAttentionValue,
                                            StateKind::Convolution,        StateKind::Recurrent};
std::string_view state_kind_name(StateKind kind);  // "self-attention key", ...

// How a step turns the state it reads into the one it returns.
enum class StateUpdate {
  Append,           // the step's new entries are concatenated along `axis` (a growing KV cache)
  WriteAtPosition,  // a fixed-length buffer written in place at cache_position along `axis` (a static cache)
  Replace,          // the step returns a whole new state of the same shape (convolution, SSM)
  Keep,             // the first step computes it, later steps read it unchanged and return none
                    // (an encoder-decoder's cross-attention keys/values; `axis` is the encoder length)
};
std::string_view state_update_name(StateUpdate update);  // "append", "write at position", "replace"

// One layer's piece of state. `shape` is what a step reads, rows first (`batch_size`); for Append and
// WriteAtPosition the dim at `axis` is the cached length: the step's symbol for a growing cache (the
// task names it per step), the fixed buffer length for a static one.
struct StateSpec {
  int64_t layer = 0;
  StateKind kind = StateKind::SelfAttentionKey;
  DType dtype = DType::F32;
  Shape shape;
  StateUpdate update = StateUpdate::Append;
  int64_t axis = -1;  // the length axis; -1 for Replace
};

// `shape` with its length axis set to `length` (a Replace or Keep state's shape as it is).
Shape state_shape(const StateSpec& s, Dim length);
// The concrete shape of a state of `batch` rows holding `length` positions (a Keep state's: the
// encoder's length; a Replace state ignores `length`). Every other dim must be fixed.
std::vector<int64_t> state_dims(const StateSpec& s, int64_t batch, int64_t length);

// A decoder's key/value cache: per layer a self-attention key and value [batch_size, kv_heads,
// length, head_dim], appended to (growing) or written at cache_position in a buffer of max_cache_len
// (static). `length` is the growing cache's symbol for what a step reads.
struct KvCacheGeometry {
  int64_t num_layers = 0, num_kv_heads = 0, head_dim = 0;
  bool static_cache = false;
  int64_t max_cache_len = 0;
};
std::vector<StateSpec> kv_cache_states(const KvCacheGeometry& g, const std::string& length = "past_sequence_length");
// An encoder-decoder's decoder state: per layer its self-attention key and value [batch_size, heads,
// `self_length`, head_dim], appended to (or, given `static_length`, fixed buffers of that length
// written at cache_position), and its cross-attention key and value [batch_size, heads,
// `encoder_length`, head_dim], computed by the first step from the encoder's output and kept.
std::vector<StateSpec> encoder_decoder_states(int64_t num_layers, int64_t heads, int64_t head_dim,
                                              const std::string& self_length, const std::string& encoder_length,
                                              std::optional<int64_t> static_length = std::nullopt);

// A short convolution's carried inputs (LFM2's Lfm2ShortConv): the last `width` = kernel - 1 columns
// [batch_size, channels, width] it read, channels first as the depthwise conv reads them, replaced
// whole by each step. The same with a static or a growing attention cache: it has no length axis.
StateSpec conv_state(int64_t layer, int64_t channels, int64_t width);

// A selective state-space scan's state (Mamba-2's SSD): [batch_size, heads, head_dim, state_size], in
// Transformers' cache layout (Mamba2's recurrent_states), replaced whole by each step.
StateSpec ssm_state(int64_t layer, int64_t heads, int64_t head_dim, int64_t state_size);

// Mamba-1's selective scan state: [batch_size, channels, state_size] (intermediate channels, each with
// its own decay per state), Transformers' cache layout (MambaMixer's recurrent_states), replaced whole.
StateSpec selective_scan_state(int64_t layer, int64_t channels, int64_t state_size);

}  // namespace hfx::ir
