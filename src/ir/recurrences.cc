#include "ir/recurrences.h"

#include <climits>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace hfx::ir {

namespace {

// Zeros [rows of `like`, `mid`..., tail...]: `mid` a 1-D i64 value of run-time dims.
ir::ValueId zeros(ir::Builder& b, ir::ValueId like, ir::ValueId mid, const std::vector<int64_t>& tail) {
  ir::ValueId dims = b.concat({b.shape_of(like, 0, 1), mid, b.i64s(tail)}, 0);
  return b.add1("Expand", {b.f32(0.0f), dims});
}

ir::ValueId identity(ir::Builder& b, int64_t n) {
  std::vector<float> eye(size_t(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) eye[size_t(i * n + i)] = 1.0f;
  return b.constant(Tensor::from_vector<float>(DType::F32, {n, n}, eye), "eye");
}

// The last two axes of a rank-5 value swapped.
ir::ValueId t5(ir::Builder& b, ir::ValueId x) { return b.transpose(x, {0, 1, 2, 4, 3}); }

}  // namespace

int64_t delta_rule_scan_steps(int64_t max_positions, int64_t chunk) {
  HFX_CHECK(max_positions > 0 && chunk > 0, "a delta-rule scan over {} positions in chunks of {}", max_positions, chunk);
  const int64_t boundaries = (max_positions + chunk - 1) / chunk - 1;  // chunks whose start state is scanned
  int64_t steps = 0;
  while ((int64_t(1) << steps) < boundaries) ++steps;
  return steps;
}

DeltaRuleOut gated_delta_rule_primitives(ir::Builder& b, ir::ValueId q, ir::ValueId k, ir::ValueId v, ir::ValueId g,
                                         ir::ValueId beta, ir::ValueId initial, const DeltaRuleShape& sh) {
  HFX_CHECK(sh.heads > 0 && sh.key_dim > 0 && sh.value_dim > 0 && sh.chunk > 0, "a delta rule of {} heads x {} x {}, chunk {}",
            sh.heads, sh.key_dim, sh.value_dim, sh.chunk);
  auto scope = b.scope("delta_rule");
  const int64_t H = sh.heads, K = sh.key_dim, V = sh.value_dim, L = sh.chunk;

  // Chunks of c = min(s, chunk) positions, the step padded to n = ceil(s / c) of them.
  ir::ValueId s = b.shape_of(q, 1, 2);  // [1]
  ir::ValueId c = b.add1("Where", {b.add1("Less", {s, b.i64s({L})}), s, b.i64s({L})});
  ir::ValueId n = b.divide(b.minus(b.plus(s, c), b.i64s({1})), c);
  ir::ValueId pad = b.minus(b.times(n, c), s);
  // [b, s, H, tail...] -> [b, H, n, c, tail...]
  auto chunked = [&](ir::ValueId x, std::vector<int64_t> tail) {
    x = b.concat({x, zeros(b, x, pad, tail)}, 1);
    x = b.add1("Reshape", {x, b.concat({b.i64s({0, -1}), c, b.i64s(tail)}, 0)});
    return tail.size() == 2 ? b.transpose(x, {0, 3, 1, 2, 4}) : b.transpose(x, {0, 3, 1, 2});
  };
  ir::ValueId qc = chunked(q, {H, K}), kc = chunked(k, {H, K}), vc = chunked(v, {H, V});
  ir::ValueId gc = chunked(g, {H}), bc = chunked(beta, {H});  // [b, H, n, c]
  ir::ValueId k_beta = b.times(kc, b.unsqueeze(bc, {4})), v_beta = b.times(vc, b.unsqueeze(bc, {4}));
  ir::ValueId cum = b.add1("CumSum", {gc, b.i64(3)});  // log decay from the chunk's start to each position

  // Pairwise decays exp(cum_i - cum_j) on and below the diagonal, 0 above (Transformers masks the
  // difference to -inf before exp; the inner Where keeps exp from overflowing above the diagonal).
  ir::ValueId r = b.add1("Range", {b.i64(0), b.squeeze(c, {0}), b.i64(1)});
  ir::ValueId rows = b.unsqueeze(r, {1}), cols = b.unsqueeze(r, {0});
  ir::ValueId on_or_below = b.add1("LessOrEqual", {cols, rows}), below = b.add1("Less", {cols, rows});
  ir::ValueId diff = b.minus(b.unsqueeze(cum, {4}), b.unsqueeze(cum, {3}));  // [b, H, n, c, c]
  ir::ValueId decay = b.add1("Where", {on_or_below, b.add1("Exp", {b.add1("Where", {on_or_below, diff, b.f32(0.0f)})}),
                                       b.f32(0.0f)});
  ir::ValueId kt = t5(b, kc);  // [b, H, n, K, c]

  // The UT transform T = (I + N)^-1, N the strictly lower part of (k_beta k^T) * decay: with X = -N,
  // (I + X)(I + X^2)(I + X^4)... = sum of X^p for p < 2^factors, exact once 2^factors >= chunk.
  ir::ValueId x = b.add1("Where", {below, b.add1("Neg", {b.times(b.matmul(k_beta, kt), decay)}), b.f32(0.0f)});
  ir::ValueId eye_c = b.cast(b.add1("Equal", {rows, cols}), DType::F32);
  ir::ValueId inv = eye_c;
  {
    auto ut = b.scope("ut_inverse");
    ir::ValueId power = x;
    for (int64_t span = 1; span < L; span *= 2) {
      if (span > 1) power = b.matmul(power, power);
      inv = span == 1 ? b.plus(eye_c, power) : b.plus(inv, b.matmul(inv, power));
    }
    // One step of iterative refinement (Newton-Schulz): inv += inv (I - (I - X) inv). The series'
    // high powers of X are large where the decays are near 1, and their sum cancels; the residual
    // of the system itself is small, and one step brings the inverse back to what its conditioning
    // allows (Transformers' forward substitution's accuracy).
    ir::ValueId residual = b.minus(eye_c, b.matmul(b.minus(eye_c, x), inv));
    inv = b.plus(inv, b.matmul(inv, residual));
  }
  ir::ValueId exp_cum = b.add1("Exp", {cum});
  ir::ValueId u = b.matmul(inv, v_beta);                                       // [b, H, n, c, V]
  ir::ValueId w = b.matmul(inv, b.times(k_beta, b.unsqueeze(exp_cum, {4})));  // [b, H, n, c, K]
  ir::ValueId intra = b.times(b.matmul(qc, kt), decay);                       // [b, H, n, c, c]
  ir::ValueId q_decayed = b.times(qc, b.unsqueeze(exp_cum, {4}));
  ir::ValueId last_cum = b.slice(cum, -1, INT64_MAX, 3);                      // [b, H, n, 1]
  ir::ValueId k_decayed_t = t5(b, b.times(kc, b.unsqueeze(b.add1("Exp", {b.minus(last_cum, cum)}), {4})));  // [b, H, n, K, c]
  ir::ValueId chunk_decay = b.unsqueeze(b.add1("Exp", {last_cum}), {4});      // [b, H, n, 1, 1]

  // Chunk j maps its start state S to M_j S + B_j: M_j = chunk_decay_j I - k_decayed_j^T W_j,
  // B_j = k_decayed_j^T U_j. The start states of chunks 1..n-1 are the prefix compositions of the
  // maps of chunks 0..n-2 applied to the carried state.
  ir::ValueId start0 = initial != ir::kNone ? initial : zeros(b, q, b.i64s({H}), {K, V});
  start0 = b.unsqueeze(start0, {2});  // [b, H, 1, K, V]
  ir::ValueId starts = start0;
  {
    auto scan = b.scope("chunk_scan");
    auto head = [&](ir::ValueId t) { return b.slice(t, 0, -1, 2); };  // chunks 0..n-2 (none for one chunk)
    ir::ValueId kdt = head(k_decayed_t);
    ir::ValueId m = b.minus(b.times(head(chunk_decay), identity(b, K)), b.matmul(kdt, head(w)));  // [b, H, n-1, K, K]
    ir::ValueId add = b.matmul(kdt, head(u));                                                      // [b, H, n-1, K, V]
    const int64_t steps = delta_rule_scan_steps(sh.max_positions, L);
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t o = int64_t(1) << step;
      // Element i >= o becomes (its map) after (the map of i - o); the first o are complete.
      ir::ValueId later_m = b.slice(m, o, INT64_MAX, 2), earlier_m = b.slice(m, 0, -o, 2);
      ir::ValueId later_add = b.slice(add, o, INT64_MAX, 2), earlier_add = b.slice(add, 0, -o, 2);
      ir::ValueId new_m = b.matmul(later_m, earlier_m);
      ir::ValueId new_add = b.plus(b.matmul(later_m, earlier_add), later_add);
      m = b.concat({b.slice(m, 0, o, 2), new_m}, 2);
      add = b.concat({b.slice(add, 0, o, 2), new_add}, 2);
    }
    // The prefix maps applied to the carried state, as one [(n-1) K, K] x [K, V] product per head (a
    // batched product broadcasting n - 1 = 0 against 1 is refused by ONNX Runtime).
    ir::ValueId rows_k = b.times(b.shape_of(m, 2, 3), b.i64s({K}));
    ir::ValueId flat = b.add1("Reshape", {m, b.concat({b.shape_of(m, 0, 2), rows_k, b.i64s({K})}, 0)});
    ir::ValueId applied = b.add1("Reshape", {b.matmul(flat, b.squeeze(start0, {2})), b.shape_of(add, 0, 5)});
    starts = b.concat({start0, b.plus(applied, add)}, 2);  // [b, H, n, K, V]
  }

  // Each chunk read from its start state, and the last chunk's update for the state after the step.
  ir::ValueId v_new = b.minus(u, b.matmul(w, starts));                              // [b, H, n, c, V]
  ir::ValueId o = b.plus(b.matmul(q_decayed, starts), b.matmul(intra, v_new));       // [b, H, n, c, V]
  auto last = [&](ir::ValueId t) { return b.slice(t, -1, INT64_MAX, 2); };
  ir::ValueId final_state = b.plus(b.times(last(starts), last(chunk_decay)), b.matmul(last(k_decayed_t), last(v_new)));
  DeltaRuleOut out;
  out.final_state = b.squeeze(final_state, {2});  // [b, H, K, V]
  o = b.reshape(b.transpose(o, {0, 2, 3, 1, 4}), {0, -1, H, V});                   // [b, n c, H, V]
  out.out = b.add1("Slice", {o, b.i64s({0}), s, b.i64s({1})});                      // [b, s, H, V]
  return out;
}

CausalConvOut causal_conv_primitives(ir::Builder& b, ir::ValueId x, ir::ValueId past, ir::ValueId weight, ir::ValueId bias,
                                     int64_t channels, int64_t kernel) {
  HFX_CHECK(kernel >= 2, "a causal conv of kernel {} carries no state", kernel);
  const int64_t width = kernel - 1;
  ir::ValueId full = b.concat({past, x}, 2);  // [b, channels, kernel - 1 + s]
  CausalConvOut r;
  r.present = b.slice(full, -width, INT64_MAX, 2);
  // Tap k reads full[:, :, k : k + s], i.e. up to kernel - 1 - k columns before full's end.
  for (int64_t k = 0; k < kernel; ++k) {
    ir::ValueId tap = b.slice(full, k, k == width ? INT64_MAX : k - width, 2);
    ir::ValueId w = b.slice(weight, k, k + 1, 1);  // [channels, 1]
    ir::ValueId term = b.times(tap, w);
    r.out = r.out == ir::kNone ? term : b.plus(r.out, term);
  }
  if (bias != ir::kNone) r.out = b.plus(r.out, b.reshape(bias, {channels, 1}));
  return r;
}

namespace {

// floor(sqrt(s)) for s [1] >= 1, at most kMaxSqrtChunk, in integers (a float square root's
// truncation is not a cast every runtime rounds alike): the count of k in 1..kMaxSqrtChunk with k^2 <= s.
ValueId sqrt_chunk(Builder& b, ValueId s) {
  ValueId k = b.add1("Range", {b.i64(1), b.i64(kMaxSqrtChunk + 1), b.i64(1)});
  ValueId fits = b.cast(b.add1("LessOrEqual", {b.times(k, k), s}), DType::I64);
  return b.add1("ReduceSum", {fits, b.i64s({0})}, {{"keepdims", int64_t(1)}});  // [1]
}

}  // namespace

ValueId exp_segment_sum(Builder& b, ValueId x, ValueId size) {
  ValueId r = b.add1("Range", {b.i64(0), size, b.i64(1)});
  ValueId rows = b.unsqueeze(r, {1}), cols = b.unsqueeze(r, {0});
  ValueId below = b.add1("Less", {cols, rows});          // j < i
  ValueId on_or_below = b.add1("LessOrEqual", {cols, rows});  // j <= i
  const size_t rank = b.graph().value(x).shape.size();
  ValueId by_row = b.unsqueeze(x, {int64_t(rank)});       // [..., m, 1]: x[..., i] along row i
  ValueId kept = b.add1("Where", {below, by_row, b.f32(0.0f)});  // [..., m, m]
  ValueId sums = b.add1("CumSum", {kept, b.i64(int64_t(rank) - 1)});
  return b.add1("Where", {on_or_below, b.add1("Exp", {sums}), b.f32(0.0f)});
}

SsdScanOut ssd_scan_primitives(Builder& b, ValueId xdt, ValueId log_decay, ValueId B, ValueId C,
                               ValueId initial, const SsdScanShape& sh) {
  HFX_CHECK(sh.heads > 0 && sh.head_dim > 0 && sh.state_size > 0 && sh.chunk >= 0, "an SSD scan of {} heads x {} x {}, chunk {}",
            sh.heads, sh.head_dim, sh.state_size, sh.chunk);
  const ValueId x = xdt;  // its rows size the zeros below
  auto scope = b.scope("ssd");
  const int64_t H = sh.heads, P = sh.head_dim, N = sh.state_size, L = sh.chunk;
  // Chunks of c = min(s, chunk) positions: a prompt longer than a chunk is cut as Transformers cuts
  // it, a shorter step (a decode step: c = 1) is one chunk of its own length, not padded to `chunk`
  // (the same sums, so only rounding can differ); chunk 0: c = floor(sqrt(s)). The sequence is
  // padded to whole chunks: n = ceil(s / c) chunks, pad = n * c - s zero positions.
  ValueId s = b.shape_of(xdt, 1, 2);  // [1]
  ValueId c = L > 0 ? b.add1("Where", {b.add1("Less", {s, b.i64s({L})}), s, b.i64s({L})}) : sqrt_chunk(b, s);
  ValueId n = b.divide(b.minus(b.plus(s, c), b.i64s({1})), c);
  ValueId pad = b.minus(b.times(n, c), s);
  auto chunked = [&](ValueId v, std::vector<int64_t> tail) {  // [b, s, tail...] -> [b, n, c, tail...]
    v = b.concat({v, zeros(b, v, pad, tail)}, 1);
    return b.add1("Reshape", {v, b.concat({b.i64s({0, -1}), c, b.i64s(tail)}, 0)});
  };
  ValueId xdt_c = chunked(xdt, {H, P});  // [b, n, c, H, P]
  ValueId adt = chunked(log_decay, {H});  // [b, n, c, H]
  ValueId Bc = b.transpose(chunked(B, {H, N}), {0, 1, 3, 2, 4});    // [b, n, H, c, N]
  ValueId Cc = b.transpose(chunked(C, {H, N}), {0, 1, 3, 2, 4});    // [b, n, H, c, N]
  ValueId xc = b.transpose(xdt_c, {0, 1, 3, 2, 4});                  // [b, n, H, c, P]
  ValueId a = b.transpose(adt, {0, 1, 3, 2});                        // [b, n, H, c]
  ValueId a_cum = b.add1("CumSum", {a, b.i64(3)});

  // 1. Within each chunk: (C B^T masked by the decays) x.
  ValueId decay = exp_segment_sum(b, a, b.squeeze(c, {0}));         // [b, n, H, c, c]
  ValueId scores = b.times(b.matmul(Cc, b.transpose(Bc, {0, 1, 2, 4, 3})), decay);
  ValueId y_diag = b.matmul(scores, xc);                             // [b, n, H, c, P]

  // 2. Each chunk's own contribution to the state at its end.
  ValueId a_last = b.slice(a_cum, -1, INT64_MAX, 3);                 // [b, n, H, 1]
  ValueId to_end = b.add1("Exp", {b.minus(a_last, a_cum)});          // [b, n, H, c]
  ValueId states = b.matmul(b.transpose(xc, {0, 1, 2, 4, 3}), b.times(Bc, b.unsqueeze(to_end, {4})));  // [b, n, H, P, N]

  // 3. The state at each chunk's start: the carried state and the chunks before, decayed.
  ValueId first = initial != kNone ? b.unsqueeze(initial, {1}) : zeros(b, x, b.i64s({1}), {H, P, N});
  ValueId all = b.concat({first, states}, 1);                        // [b, n + 1, H, P, N]
  ValueId chunk_a = b.transpose(b.squeeze(a_last, {3}), {0, 2, 1});  // [b, H, n]
  chunk_a = b.concat({zeros(b, x, b.i64s({H}), {1}), chunk_a}, 2);       // [b, H, n + 1]
  ValueId chunk_decay = exp_segment_sum(b, chunk_a, b.squeeze(b.plus(n, b.i64s({1})), {0}));  // [b, H, n+1, n+1]
  ValueId flat = b.reshape(b.transpose(all, {0, 2, 1, 3, 4}), {0, 0, 0, P * N});  // [b, H, n + 1, P N]
  ValueId starts = b.transpose(b.reshape(b.matmul(chunk_decay, flat), {0, 0, 0, P, N}), {0, 2, 1, 3, 4});  // [b, n+1, H, P, N]
  SsdScanOut r;
  r.final_state = b.squeeze(b.slice(starts, -1, INT64_MAX, 1), {1});    // [b, H, P, N]
  ValueId start = b.slice(starts, 0, -1, 1);                         // [b, n, H, P, N]

  // 4. The start state read out at each position, decayed to it.
  ValueId y_off = b.times(b.matmul(Cc, b.transpose(start, {0, 1, 2, 4, 3})), b.unsqueeze(b.add1("Exp", {a_cum}), {4}));

  ValueId y = b.reshape(b.transpose(b.plus(y_diag, y_off), {0, 1, 3, 2, 4}), {0, -1, H, P});  // [b, n c, H, P]
  r.out = b.add1("Slice", {y, b.i64s({0}), s, b.i64s({1})});            // [b, s, H, P]
  return r;
}

RecurrenceStep gated_delta_rule_step(Builder& b, ValueId state, ValueId q, ValueId k, ValueId v, ValueId g,
                                     ValueId beta) {
  auto scope = b.scope("delta_rule_step");
  const ValueId decayed = b.times(state, b.unsqueeze(b.add1("Exp", {g}), {2, 3}));  // [b, H, K, V]
  // The sums over K as [1, K] x [K, V] products per head (Transformers multiplies and sums: the same
  // sums; ONNX Runtime runs a product without the [K, V] temporary).
  const ValueId kv_mem = b.matmul(b.unsqueeze(k, {2}), decayed);                     // [b, H, 1, V]
  const ValueId delta = b.times(b.minus(b.unsqueeze(v, {2}), kv_mem), b.unsqueeze(beta, {2, 3}));
  RecurrenceStep r;
  r.state = b.plus(decayed, b.times(b.unsqueeze(k, {3}), delta));                   // + k ⊗ delta
  r.out = b.squeeze(b.matmul(b.unsqueeze(q, {2}), r.state), {2});                   // [b, H, V]
  return r;
}

RecurrenceStep ssd_step(Builder& b, ValueId state, ValueId xdt, ValueId log_decay, ValueId B, ValueId C) {
  auto scope = b.scope("ssd_step");
  const ValueId dA = b.unsqueeze(b.add1("Exp", {log_decay}), {2, 3});     // [b, H, 1, 1]
  const ValueId dBx = b.times(b.unsqueeze(xdt, {3}), b.unsqueeze(B, {2}));  // [b, H, P, N]
  RecurrenceStep r;
  r.state = b.plus(b.times(state, dA), dBx);
  // h @ C as a product and a sum over N (Transformers' bmm: the same sums): a Mamba-1 scan's heads are
  // 1 x 1, which a batched MatMul runs as thousands of 1 x 1 products.
  r.out = b.add1("ReduceSum", {b.times(r.state, b.unsqueeze(C, {2})), b.i64s({3})}, {{"keepdims", int64_t(0)}});  // [b, H, P]
  return r;
}

}  // namespace hfx::ir
