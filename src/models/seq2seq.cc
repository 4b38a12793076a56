#include "models/seq2seq.h"

#include <limits>

#include "core/error.h"

namespace hfx::models {

Seq2SeqLm::CrossState Seq2SeqLm::cross_state(ir::Builder&, ir::ValueId) const {
  unsupported("{}: no cross-attention state computed apart from the decoder", summary().model_type);
}

ir::ValueId kept_or_computed(ir::Builder& b, ir::ValueId kept, ir::ValueId computed) {
  ir::ValueId both = b.concat({kept, computed}, 2);
  return b.add1("Slice", {both, b.i64s({0}), b.shape_of(computed, 2, 3), b.i64s({2})});
}

StepPositions step_positions(ir::Builder& b, const Seq2SeqDecoderInputs& in) {
  if (in.cache_position != ir::kNone) {
    ir::ValueId slots = b.squeeze(b.shape_of(in.past_key.at(0), 2, 3), {0});
    return {in.cache_position, b.add1("Range", {b.i64(0), slots, b.i64(1)})};
  }
  ir::ValueId seq = b.squeeze(b.shape_of(in.input_ids, 1, 2), {0});
  ir::ValueId past = in.past_key.empty() ? b.i64(0) : b.squeeze(b.shape_of(in.past_key[0], 2, 3), {0});
  ir::ValueId total = b.plus(past, seq);
  StepPositions p;
  p.queries = b.add1("Range", {past, total, b.i64(1)});
  p.keys = b.add1("Range", {b.i64(0), total, b.i64(1)});
  return p;
}

ir::ValueId relative_positions(ir::Builder& b, const StepPositions& p) {
  return b.minus(b.unsqueeze(p.keys, {0}), b.unsqueeze(p.queries, {1}));
}

ir::ValueId causal_bias(ir::Builder& b, const StepPositions& p, ir::ValueId bias) {
  ir::ValueId later = b.add1("Greater", {relative_positions(b, p), b.i64(0)});
  ir::ValueId lowest = b.f32(std::numeric_limits<float>::lowest());
  if (bias != ir::kNone) return b.add1("Where", {later, lowest, bias});
  return b.unsqueeze(b.add1("Where", {later, lowest, b.f32(0.0f)}), {0, 1});
}

ir::ValueId update_self_cache(ir::Builder& b, const Seq2SeqDecoderInputs& in, const std::vector<ir::ValueId>& past,
                              int64_t layer, ir::ValueId now) {
  if (past.empty()) return now;
  if (in.cache_position != ir::kNone) return b.add1("CacheUpdate", {past[size_t(layer)], now, in.cache_position});
  return b.concat({past[size_t(layer)], now}, 2);
}

}  // namespace hfx::models
