#include "ir/state.h"

#include <string>

#include "core/error.h"

namespace hfx::ir {

std::string_view state_kind_name(StateKind kind) {
  switch (kind) {
    case StateKind::SelfAttentionKey: return "self-attention key";
    case StateKind::SelfAttentionValue: return "self-attention value";
    case StateKind::CrossAttentionKey: return "cross-attention key";
    case StateKind::CrossAttentionValue: return "cross-attention value";
    case StateKind::Convolution: return "convolution state";
    case StateKind::Recurrent: return "recurrent state";
  }
  return "?";
}

std::string_view state_update_name(StateUpdate update) {
  switch (update) {
    case StateUpdate::Append: return "append";
    case StateUpdate::WriteAtPosition: return "write at position";
    case StateUpdate::Replace: return "replace";
    case StateUpdate::Keep: return "keep";
  }
  return "?";
}

Shape state_shape(const StateSpec& s, Dim length) {
  Shape shape = s.shape;
  if (s.update != StateUpdate::Replace && s.update != StateUpdate::Keep) {
    HFX_CHECK(s.axis > 0 && size_t(s.axis) < shape.size(), "state of layer {}: length axis {} outside rank {}", s.layer,
              s.axis, shape.size());
    shape[size_t(s.axis)] = std::move(length);
  }
  return shape;
}

std::vector<int64_t> state_dims(const StateSpec& s, int64_t batch, int64_t length) {
  std::vector<int64_t> dims;
  for (size_t d = 0; d < s.shape.size(); ++d) {
    if (d == 0) dims.push_back(batch);
    else if (s.update != StateUpdate::Replace && int64_t(d) == s.axis) dims.push_back(length);
    else {
      HFX_CHECK(s.shape[d].is_fixed(), "state of layer {}: dim {} is {}, not fixed", s.layer, d, s.shape[d].str());
      dims.push_back(s.shape[d].value);
    }
  }
  return dims;
}

std::vector<StateSpec> encoder_decoder_states(int64_t num_layers, int64_t heads, int64_t head_dim,
                                              const std::string& self_length, const std::string& encoder_length,
                                              std::optional<int64_t> static_length) {
  const Dim self_len = static_length ? Dim::fixed(*static_length) : Dim::sym(self_length);
  const StateUpdate self_update = static_length ? StateUpdate::WriteAtPosition : StateUpdate::Append;
  std::vector<StateSpec> states;
  for (int64_t i = 0; i < num_layers; ++i) {
    for (StateKind kind : {StateKind::SelfAttentionKey, StateKind::SelfAttentionValue})
      states.push_back({i, kind, DType::F32, {Dim::sym("batch_size"), Dim::fixed(heads), self_len, Dim::fixed(head_dim)},
                        self_update, 2});
    for (StateKind kind : {StateKind::CrossAttentionKey, StateKind::CrossAttentionValue})
      states.push_back({i, kind, DType::F32,
                        {Dim::sym("batch_size"), Dim::fixed(heads), Dim::sym(encoder_length), Dim::fixed(head_dim)},
                        StateUpdate::Keep, 2});
  }
  return states;
}

std::vector<StateSpec> kv_cache_states(const KvCacheGeometry& g, const std::string& length) {
  const Dim len = g.static_cache ? Dim::fixed(g.max_cache_len) : Dim::sym(length);
  const Shape shape = {Dim::sym("batch_size"), Dim::fixed(g.num_kv_heads), len, Dim::fixed(g.head_dim)};
  const StateUpdate update = g.static_cache ? StateUpdate::WriteAtPosition : StateUpdate::Append;
  std::vector<StateSpec> states;
  for (int64_t i = 0; i < g.num_layers; ++i)
    for (StateKind kind : {StateKind::SelfAttentionKey, StateKind::SelfAttentionValue})
      states.push_back({i, kind, DType::F32, shape, update, 2});
  return states;
}

StateSpec conv_state(int64_t layer, int64_t channels, int64_t width) {
  return {layer, StateKind::Convolution, DType::F32, {Dim::sym("batch_size"), Dim::fixed(channels), Dim::fixed(width)},
          StateUpdate::Replace, -1};
}

StateSpec ssm_state(int64_t layer, int64_t heads, int64_t head_dim, int64_t state_size) {
  return {layer, StateKind::Recurrent, DType::F32,
          {Dim::sym("batch_size"), Dim::fixed(heads), Dim::fixed(head_dim), Dim::fixed(state_size)}, StateUpdate::Replace, -1};
}

StateSpec selective_scan_state(int64_t layer, int64_t channels, int64_t state_size) {
  return {layer, StateKind::Recurrent, DType::F32, {Dim::sym("batch_size"), Dim::fixed(channels), Dim::fixed(state_size)},
          StateUpdate::Replace, -1};
}

}  // namespace hfx::ir
