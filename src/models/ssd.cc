#include "models/ssd.h"

#include <climits>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace hfx::models {

namespace {

// Zeros [rows of `like`, `mid`..., tail...]: `mid` a 1-D i64 value of run-time dims.
ir::ValueId zeros(ir::Builder& b, ir::ValueId like, ir::ValueId mid, const std::vector<int64_t>& tail) {
  ir::ValueId dims = b.concat({b.shape_of(like, 0, 1), mid, b.i64s(tail)}, 0);
  return b.add1("Expand", {b.f32(0.0f), dims});
}

// floor(sqrt(s)) for s [1] >= 1, at most kMaxSqrtChunk, in integers (a float square root's
// truncation is not a cast every runtime rounds alike): the count of k in 1..kMaxSqrtChunk with k^2 <= s.
ir::ValueId sqrt_chunk(ir::Builder& b, ir::ValueId s) {
  ir::ValueId k = b.add1("Range", {b.i64(1), b.i64(kMaxSqrtChunk + 1), b.i64(1)});
  ir::ValueId fits = b.cast(b.add1("LessOrEqual", {b.times(k, k), s}), DType::I64);
  return b.add1("ReduceSum", {fits, b.i64s({0})}, {{"keepdims", int64_t(1)}});  // [1]
}

}  // namespace

ir::ValueId exp_segment_sum(ir::Builder& b, ir::ValueId x, ir::ValueId size) {
  ir::ValueId r = b.add1("Range", {b.i64(0), size, b.i64(1)});
  ir::ValueId rows = b.unsqueeze(r, {1}), cols = b.unsqueeze(r, {0});
  ir::ValueId below = b.add1("Less", {cols, rows});          // j < i
  ir::ValueId on_or_below = b.add1("LessOrEqual", {cols, rows});  // j <= i
  const size_t rank = b.graph().value(x).shape.size();
  ir::ValueId by_row = b.unsqueeze(x, {int64_t(rank)});       // [..., m, 1]: x[..., i] along row i
  ir::ValueId kept = b.add1("Where", {below, by_row, b.f32(0.0f)});  // [..., m, m]
  ir::ValueId sums = b.add1("CumSum", {kept, b.i64(int64_t(rank) - 1)});
  return b.add1("Where", {on_or_below, b.add1("Exp", {sums}), b.f32(0.0f)});
}

SsdOut ssd_chunk_scan(ir::Builder& b, ir::ValueId x, ir::ValueId dt, ir::ValueId A, ir::ValueId B, ir::ValueId C,
                      ir::ValueId D, ir::ValueId initial, const SsdShape& sh) {
  HFX_CHECK(sh.heads > 0 && sh.head_dim > 0 && sh.state_size > 0 && sh.chunk >= 0, "an SSD scan of {} heads x {} x {}, chunk {}",
            sh.heads, sh.head_dim, sh.state_size, sh.chunk);
  auto scope = b.scope("ssd");
  const int64_t H = sh.heads, P = sh.head_dim, N = sh.state_size, L = sh.chunk;
  // Chunks of c = min(s, chunk) positions: a prompt longer than a chunk is cut as Transformers cuts
  // it, a shorter step (a decode step: c = 1) is one chunk of its own length, not padded to `chunk`
  // (the same sums, so only rounding can differ); chunk 0: c = floor(sqrt(s)). The sequence is
  // padded to whole chunks: n = ceil(s / c) chunks, pad = n * c - s zero positions.
  ir::ValueId s = b.shape_of(x, 1, 2);  // [1]
  ir::ValueId c = L > 0 ? b.add1("Where", {b.add1("Less", {s, b.i64s({L})}), s, b.i64s({L})}) : sqrt_chunk(b, s);
  ir::ValueId n = b.divide(b.minus(b.plus(s, c), b.i64s({1})), c);
  ir::ValueId pad = b.minus(b.times(n, c), s);
  auto chunked = [&](ir::ValueId v, std::vector<int64_t> tail) {  // [b, s, tail...] -> [b, n, c, tail...]
    v = b.concat({v, zeros(b, v, pad, tail)}, 1);
    return b.add1("Reshape", {v, b.concat({b.i64s({0, -1}), c, b.i64s(tail)}, 0)});
  };
  ir::ValueId xdt = chunked(b.times(x, b.unsqueeze(dt, {3})), {H, P});  // [b, n, c, H, P]
  ir::ValueId adt = chunked(b.times(dt, A), {H});                        // [b, n, c, H]
  ir::ValueId Bc = b.transpose(chunked(B, {H, N}), {0, 1, 3, 2, 4});    // [b, n, H, c, N]
  ir::ValueId Cc = b.transpose(chunked(C, {H, N}), {0, 1, 3, 2, 4});    // [b, n, H, c, N]
  ir::ValueId xc = b.transpose(xdt, {0, 1, 3, 2, 4});                    // [b, n, H, c, P]
  ir::ValueId a = b.transpose(adt, {0, 1, 3, 2});                        // [b, n, H, c]
  ir::ValueId a_cum = b.add1("CumSum", {a, b.i64(3)});

  // 1. Within each chunk: (C B^T masked by the decays) x.
  ir::ValueId decay = exp_segment_sum(b, a, b.squeeze(c, {0}));         // [b, n, H, c, c]
  ir::ValueId scores = b.times(b.matmul(Cc, b.transpose(Bc, {0, 1, 2, 4, 3})), decay);
  ir::ValueId y_diag = b.matmul(scores, xc);                             // [b, n, H, c, P]

  // 2. Each chunk's own contribution to the state at its end.
  ir::ValueId a_last = b.slice(a_cum, -1, INT64_MAX, 3);                 // [b, n, H, 1]
  ir::ValueId to_end = b.add1("Exp", {b.minus(a_last, a_cum)});          // [b, n, H, c]
  ir::ValueId states = b.matmul(b.transpose(xc, {0, 1, 2, 4, 3}), b.times(Bc, b.unsqueeze(to_end, {4})));  // [b, n, H, P, N]

  // 3. The state at each chunk's start: the carried state and the chunks before, decayed.
  ir::ValueId first = initial != ir::kNone ? b.unsqueeze(initial, {1}) : zeros(b, x, b.i64s({1}), {H, P, N});
  ir::ValueId all = b.concat({first, states}, 1);                        // [b, n + 1, H, P, N]
  ir::ValueId chunk_a = b.transpose(b.squeeze(a_last, {3}), {0, 2, 1});  // [b, H, n]
  chunk_a = b.concat({zeros(b, x, b.i64s({H}), {1}), chunk_a}, 2);       // [b, H, n + 1]
  ir::ValueId chunk_decay = exp_segment_sum(b, chunk_a, b.squeeze(b.plus(n, b.i64s({1})), {0}));  // [b, H, n+1, n+1]
  ir::ValueId flat = b.reshape(b.transpose(all, {0, 2, 1, 3, 4}), {0, 0, 0, P * N});  // [b, H, n + 1, P N]
  ir::ValueId starts = b.transpose(b.reshape(b.matmul(chunk_decay, flat), {0, 0, 0, P, N}), {0, 2, 1, 3, 4});  // [b, n+1, H, P, N]
  SsdOut r;
  r.final_state = b.squeeze(b.slice(starts, -1, INT64_MAX, 1), {1});    // [b, H, P, N]
  ir::ValueId start = b.slice(starts, 0, -1, 1);                         // [b, n, H, P, N]

  // 4. The start state read out at each position, decayed to it.
  ir::ValueId y_off = b.times(b.matmul(Cc, b.transpose(start, {0, 1, 2, 4, 3})), b.unsqueeze(b.add1("Exp", {a_cum}), {4}));

  ir::ValueId y = b.reshape(b.transpose(b.plus(y_diag, y_off), {0, 1, 3, 2, 4}), {0, -1, H, P});  // [b, n c, H, P]
  y = b.add1("Slice", {y, b.i64s({0}), s, b.i64s({1})});                // [b, s, H, P]
  if (D != ir::kNone) y = b.plus(y, b.times(x, b.reshape(D, {H, 1})));
  r.out = y;
  return r;
}

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
