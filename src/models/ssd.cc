#include "models/ssd.h"

#include <climits>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ir/recurrences.h"

namespace hfx::models {

SsdOut ssd_chunk_scan(ir::Builder& b, ir::ValueId x, ir::ValueId dt, ir::ValueId A, ir::ValueId B, ir::ValueId C,
                      ir::ValueId D, ir::ValueId initial, const SsdShape& sh) {
  HFX_CHECK(sh.heads > 0 && sh.head_dim > 0 && sh.state_size > 0 && sh.chunk >= 0, "an SSD scan of {} heads x {} x {}, chunk {}",
            sh.heads, sh.head_dim, sh.state_size, sh.chunk);
  // The composite SsdScan (ir/recurrences.h decomposes it; the onnx ort profile writes it as
  // com.microsoft LinearAttention, update_rule gated).
  auto outs = b.add("SsdScan", {x, dt, A, B, C, D, initial},
                    {{"heads", sh.heads}, {"head_dim", sh.head_dim}, {"state_size", sh.state_size}, {"chunk", sh.chunk}});
  return {outs[0], outs[1]};
}

ir::ValueId exp_segment_sum(ir::Builder& b, ir::ValueId x, ir::ValueId size) { return ir::exp_segment_sum(b, x, size); }

SsdOut selective_scan(ir::Builder& b, ir::ValueId x, ir::ValueId dt, ir::ValueId A, ir::ValueId B, ir::ValueId C,
                      ir::ValueId D, ir::ValueId initial, int64_t channels, int64_t state_size) {
  auto scope = b.scope("selective_scan");
  const int64_t I = channels, N = state_size;
  // [b, s, I] -> [b, s, I N]: each channel's value over its N heads.
  auto per_state = [&](ir::ValueId v) {
    v = b.add1("Expand", {b.unsqueeze(v, {3}), b.concat({b.shape_of(v, 0, 2), b.i64s({I, N})}, 0)});
    return b.reshape(v, {0, 0, I * N});
  };
  // [b, s, N] -> [b, s, I N, 1]: each state's value over the I channels' heads.
  auto per_channel = [&](ir::ValueId v) {
    v = b.add1("Expand", {b.unsqueeze(v, {2}), b.concat({b.shape_of(v, 0, 2), b.i64s({I, N})}, 0)});
    return b.reshape(v, {0, 0, I * N, 1});
  };
  ir::ValueId xs = b.unsqueeze(per_state(x), {3});  // [b, s, I N, 1]
  ir::ValueId first = initial != ir::kNone ? b.reshape(initial, {0, I * N, 1, 1}) : ir::kNone;
  SsdOut heads = ssd_chunk_scan(b, xs, per_state(dt), b.reshape(A, {I * N}), per_channel(B), per_channel(C), ir::kNone,
                                first, {I * N, 1, 1, 0});
  SsdOut r;
  r.out = b.add1("ReduceSum", {b.reshape(heads.out, {0, 0, I, N}), b.i64s({3})}, {{"keepdims", int64_t(0)}});
  if (D != ir::kNone) r.out = b.plus(r.out, b.times(x, D));
  r.final_state = b.reshape(heads.final_state, {0, I, N});
  return r;
}

}  // namespace hfx::models
