// The ONNX backend's `ort` profile: rewrites the IR composites into ONNX Runtime's fused ops
// (ops.h "Target ops"), the way onnxruntime-genai's model builder lays a decoder out:
//   Attention / SoftcapAttention + RotaryEmbedding (+ the cache Concat)
//                                                      -> com.microsoft GroupQueryAttention, do_rotary=1,
//       cos/sin caches precomputed from the step's RopeCosSin table (longrope: a short and a long pair,
//       chosen per step from the total length; dynamic NTK, and tables over kMaxRopeCacheRows rows: the
//       step's rows computed in the graph;
//       partial rotary: caches [rows, r/2],
//       GQA rotates the first r dims and passes the rest), seqlens_k / total_sequence_length derived once
//       from attention_mask (position_ids is no longer read; learned positions, GPT-2's, run without
//       rotary and read each row's real past + Range(S) instead), `softcap` from SoftcapAttention,
//       `local_window_size` = the layer's AttentionBias sliding_window (ORT 1.31 CPU keeps key j for query
//       i when i - j < local_window_size, Transformers' window; measured in tests/oracle/test_ort_profile.py)
//   q/k/v Linear on one input                          -> one packed Linear (q | k | v rows); with q/k
//       norms in between (Qwen3, Gemma 3, OLMo 2, StableLM 2) it is sliced back into q, k, v for the norms
//   a gated MLP's gate and up Linears on one input     -> one packed Linear (gate | up rows), sliced back
//       for SwiGLU(gate, up) or Mul(Gelu(gate), up): one product a layer fewer per step (decode 2 %
//       faster at fp32 on the Qwen3-0.6B shape, measured paired in one process: docs/benchmarks.md)
//   RMSNorm(a + b), a + b reused as the residual        -> SkipSimplifiedLayerNormalization
//   other RMSNorm                                       -> SimplifiedLayerNormalization
// Attention the fused op cannot express, or that ONNX Runtime's kernel refuses (kGqaConstraints), is
// reported by ort_profile_blockers(); the export then keeps the portable lowering for that model.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "ir/ops.h"
#include "ir/rewrite.h"
#include "passes/pass.h"

namespace hfx::passes {

namespace {

using ir::kNone;
using ir::ValueId;

using ir::producer;
using ir::scope_of;

bool is_input(const ir::Graph& g, ValueId id) {
  for (auto in : g.inputs())
    if (in == id) return true;
  return false;
}

struct Side {
  ValueId bhsd = kNone;              // [b, h, s, d] when it is not a Transpose (GPT-NeoX's per-head split)
  ValueId heads4 = kNone;            // [b, s, h, d], the input of the Transpose to [b, h, s, d]
  ValueId flat = kNone;              // [b, s, h * d] when heads4 is a plain Reshape of it
  const ir::Node* linear = nullptr;  // the Linear producing `flat`, or under the norm chain when `normed`
  const ir::Node* slice = nullptr;   // or the Slice of a fused projection producing it
  bool normed = false;               // a q/k norm sits between `linear` and the attention
};

struct Plan {
  const ir::Node* attention = nullptr;
  Side q, k, v;
  ValueId past_k = kNone, past_v = kNone;
  const ir::Node* rope = nullptr;  // RopeCosSin
  // longrope (Phi-3): RopeCosSin's frequencies are Where(longest position > original - 1, long, short);
  // GroupQueryAttention then reads the long caches from the step whose total length passes `original`.
  std::optional<Tensor> short_inv, long_inv;
  int64_t longrope_original = 0;
  int64_t hq = 0, hkv = 0, d = 0;
  int64_t rotary = 0;    // rotated dims (the first `rotary` of each head; d unless partial)
  bool interleaved = false;  // GPT-J style pairs (GroupQueryAttention's rotary_interleaved)
  double softcap = 0.0;  // SoftcapAttention's cap (GroupQueryAttention's softcap), 0 without
  int64_t window = 0;    // the layer's sliding window (local_window_size), 0 without
  ValueId packed_source = kNone;  // phi-3 style fused projection output feeding all three
  bool pack_linears = false;      // q/k/v Linears on one input, packed by this pass
};

// What ONNX Runtime 1.31's CPU GroupQueryAttention accepts, as data: the kernel's own input checks
// (contrib_ops/cpu/bert/group_query_attention_helper.h, CheckInputs), each confirmed by exporting a
// tiny model that breaks it and running it (tests/oracle/test_runtime_acceptance.py). ORT refuses such a
// graph at its first run, so an attention outside one keeps the portable lowering for the whole model,
// the note and hfx.json naming the constraint. In checking order: the first broken one is reported.
struct FusedOpConstraint {
  const char* op;
  bool (*holds)(const Plan&);
  std::string (*reason)(const Plan&);  // why it does not hold, for the fallback note
};

const FusedOpConstraint kGqaConstraints[] = {
    {"GroupQueryAttention", [](const Plan& p) { return p.hkv > 0 && p.hq % p.hkv == 0; },
     [](const Plan& p) {
       return fmt::format("{} query heads are not a multiple of {} kv heads (GroupQueryAttention: \"num_heads must be a "
                          "multiple of kv_num_heads\")",
                          p.hq, p.hkv);
     }},
    {"GroupQueryAttention", [](const Plan& p) { return p.d % 8 == 0; },
     [](const Plan& p) {
       return fmt::format("head_dim {} is not a multiple of 8 (GroupQueryAttention: \"head_size must be a multiple of 8\")",
                          p.d);
     }},
    // cos/sin caches present (do_rotary): the kernel asks head_size % 16, also for partial rotary.
    {"GroupQueryAttention", [](const Plan& p) { return !p.rope || p.d % 16 == 0; },
     [](const Plan& p) {
       return fmt::format("head_dim {} is not a multiple of 16 (GroupQueryAttention's rotary needs it)", p.d);
     }},
    // cos_cache width rotary_dim / 2: a multiple of 8 (and <= head_size / 2: rotary <= head_dim, matched above).
    {"GroupQueryAttention", [](const Plan& p) { return !p.rope || (p.rotary / 2) % 8 == 0; },
     [](const Plan& p) {
       return fmt::format("partial rotary over {} of {} dims (GroupQueryAttention's cos/sin caches need rotary_dim / 2 "
                          "a multiple of 8)",
                          p.rotary, p.d);
     }},
};

// The first GroupQueryAttention constraint the plan breaks, as the reason text.
std::optional<std::string> gqa_constraint_broken(const Plan& p) {
  for (const auto& c : kGqaConstraints)
    if (!c.holds(p)) return c.reason(p);
  return std::nullopt;
}

// Side of the attention: Transpose{0,2,1,3}(heads4), heads4 = Reshape(flat) optionally; else any
// [b, h, s, d] value (transposed back and flattened for GroupQueryAttention).
std::optional<Side> side_of(const ir::Graph& g, ValueId transposed) {
  const ir::Node* t = producer(g, transposed);
  Side s;
  if (!t || t->op != "Transpose" || t->attr_ints("perm") != std::vector<int64_t>{0, 2, 1, 3}) {
    s.bhsd = transposed;
    return s;
  }
  s.heads4 = t->inputs[0];
  const ir::Node* r = producer(g, s.heads4);
  if (r && r->op == "Reshape") {
    auto shape = g.constant(r->inputs[1]);
    auto v = shape ? shape->to_i64_vector() : std::vector<int64_t>{};
    if (v.size() == 4 && v[0] == 0 && v[1] == 0) {
      s.flat = r->inputs[0];
      const ir::Node* p = producer(g, s.flat);
      if (p && p->op == "Linear" && g.weight(p->inputs[1])) s.linear = p;
      if (p && p->op == "Slice") s.slice = p;
    }
  }
  if (!s.linear && !s.slice && s.heads4 != kNone) {
    // q/k norms per head (RMSNorm(Reshape(Linear)): Qwen3, Gemma 3; LayerNorm: StableLM 2) or over the
    // whole projection (Reshape(RMSNorm(Linear)): OLMo 2). The Linear can still be packed: its slice of
    // the packed output feeds the same chain.
    const ir::Node* n = producer(g, s.heads4);
    bool norm = false;
    while (n && (n->op == "Reshape" || n->op == "RMSNorm" || n->op == "LayerNorm")) {
      norm = norm || n->op != "Reshape";
      n = producer(g, n->inputs[0]);
    }
    if (norm && n && n->op == "Linear" && g.weight(n->inputs[1])) {
      s.linear = n;
      s.normed = true;
    }
  }
  return s;
}

// Phi-3's longrope frequencies as models/blocks.cc builds them: Where(Greater(ReduceMax(Cast(position_ids)),
// original - 1), long_inv_freq, short_inv_freq). Fills the plan's tables and `original`.
bool match_longrope(const ir::Graph& g, ValueId inv_freq, Plan& p) {
  const ir::Node* where = producer(g, inv_freq);
  if (!where || where->op != "Where") return false;
  const ir::Node* greater = producer(g, where->inputs[0]);
  auto long_inv = g.constant(where->inputs[1]), short_inv = g.constant(where->inputs[2]);
  if (!greater || greater->op != "Greater" || !long_inv || !short_inv || long_inv->numel() != short_inv->numel())
    return false;
  const ir::Node* longest = producer(g, greater->inputs[0]);
  const auto threshold = g.constant(greater->inputs[1]);
  if (!longest || longest->op != "ReduceMax" || !threshold || threshold->numel() != 1) return false;
  const ir::Node* cast = producer(g, longest->inputs[0]);
  const ValueId positions = cast && cast->op == "Cast" ? cast->inputs[0] : longest->inputs[0];
  if (g.value(positions).name != "position_ids") return false;
  p.short_inv = *short_inv;
  p.long_inv = *long_inv;
  p.longrope_original = int64_t(std::llround(double(threshold->cast(DType::F32).as<float>()[0]))) + 1;
  return true;
}

// One attention's plan, or the reason the fused op cannot express it.
std::optional<Plan> match(const ir::Graph& g, const ir::Node& attn, std::string& why) {
  Plan p;
  p.attention = &attn;
  if (attn.op == "SoftcapAttention") p.softcap = attn.attr_float("softcap");
  const ir::Node* mask = producer(g, attn.inputs[3]);
  if (!mask || mask->op != "AttentionBias") {
    why = "attention mask is not the causal AttentionBias";
    return std::nullopt;
  }
  if (mask->input(2) != kNone) {
    why = "static cache (cache_position writes)";
    return std::nullopt;
  }
  p.window = mask->attr_int("sliding_window", 0);
  const ir::Node* qrot = producer(g, attn.inputs[0]);
  if (!qrot || qrot->op != "RotaryEmbedding") qrot = nullptr;  // learned positions (GPT-2): do_rotary=0
  p.rope = qrot ? producer(g, qrot->inputs[1]) : nullptr;
  p.interleaved = qrot && qrot->attr_int("interleaved", 0) != 0;
  if (qrot && (!p.rope || p.rope->op != "RopeCosSin" || producer(g, qrot->inputs[2]) != p.rope)) {
    why = "rotary tables are not a RopeCosSin";
    return std::nullopt;
  }
  if (p.rope && !g.constant(p.rope->inputs[1]) && !match_longrope(g, p.rope->inputs[1], p)) {
    why = "rotary frequencies chosen per step, other than longrope's switch on the longest position";
    return std::nullopt;
  }
  const Shape qs = g.value(attn.inputs[0]).shape;
  const Shape ks = g.value(attn.inputs[1]).shape;
  if (!qs[1].is_fixed() || !qs[3].is_fixed() || !ks[1].is_fixed()) {
    why = "head counts are not fixed";
    return std::nullopt;
  }
  p.hq = qs[1].value;
  p.hkv = ks[1].value;
  p.d = qs[3].value;
  const Dim r = qrot ? g.value(qrot->inputs[1]).shape.back() : Dim::fixed(0);
  const auto inv_freq = p.short_inv ? p.short_inv : qrot ? g.constant(p.rope->inputs[1]) : std::nullopt;
  if (qrot && (!r.is_fixed() || r.value > p.d || r.value % 2 != 0 || inv_freq->numel() * 2 != r.value)) {
    why = "rotary tables do not match the head";
    return std::nullopt;
  }
  p.rotary = r.value;
  if (auto broken = gqa_constraint_broken(p)) {
    why = *broken;
    return std::nullopt;
  }
  // k: [Concat(past, ]RotaryEmbedding(Transpose(k4))[)]; v: [Concat(past, ]Transpose(v4)[)].
  auto unconcat = [&](ValueId x, ValueId& past) -> ValueId {
    const ir::Node* c = producer(g, x);
    if (c && c->op == "Concat" && c->inputs.size() == 2 && c->attr_int("axis") == 2 && is_input(g, c->inputs[0])) {
      past = c->inputs[0];
      return c->inputs[1];
    }
    return x;
  };
  ValueId kx = unconcat(attn.inputs[1], p.past_k);
  ValueId vx = unconcat(attn.inputs[2], p.past_v);
  if ((p.past_k == kNone) != (p.past_v == kNone)) {
    why = "key and value caches differ";
    return std::nullopt;
  }
  const ir::Node* krot = producer(g, kx);
  const bool k_rotated = krot && krot->op == "RotaryEmbedding";
  if (qrot ? !k_rotated || krot->inputs[1] != qrot->inputs[1] || krot->inputs[2] != qrot->inputs[2] ||
                 krot->attr_int("interleaved", 0) != qrot->attr_int("interleaved", 0)
           : k_rotated) {
    why = "keys are not rotated with the queries' tables";
    return std::nullopt;
  }
  auto q = side_of(g, qrot ? qrot->inputs[0] : attn.inputs[0]), k = side_of(g, k_rotated ? krot->inputs[0] : kx),
       v = side_of(g, vx);
  if (!q || !k || !v) {
    why = "q/k/v are not [b, s, h, d] transposed to [b, h, s, d]";
    return std::nullopt;
  }
  p.q = *q;
  p.k = *k;
  p.v = *v;
  if (p.past_v == kNone && p.v.bhsd != kNone) {  // v's producer becomes GroupQueryAttention's present_value
    why = "values without a cache are not [b, s, h, d] transposed to [b, h, s, d]";
    return std::nullopt;
  }
  // Packing: three Linears on the same input (all with or all without bias), or three slices of one
  // fused projection in q | k | v order.
  const ir::Node *lq = p.q.linear, *lk = p.k.linear, *lv = p.v.linear;
  if (lq && lk && lv && lq->inputs[0] == lk->inputs[0] && lq->inputs[0] == lv->inputs[0] &&
      lq->inputs.size() == lk->inputs.size() && lq->inputs.size() == lv->inputs.size() &&
      (lq->inputs.size() == 2 || (g.weight(lq->inputs[2]) && g.weight(lk->inputs[2]) && g.weight(lv->inputs[2]))))
    p.pack_linears = true;
  const ir::Node *sq = p.q.slice, *sk = p.k.slice, *sv = p.v.slice;
  if (sq && sk && sv && sq->inputs[0] == sk->inputs[0] && sq->inputs[0] == sv->inputs[0]) {
    auto bounds = [&](const ir::Node* s) {
      auto st = g.constant(s->inputs[1]), en = g.constant(s->inputs[2]);
      return st && en ? std::make_pair(st->to_i64_vector(), en->to_i64_vector())
                      : std::make_pair(std::vector<int64_t>{}, std::vector<int64_t>{});
    };
    const int64_t qn = p.hq * p.d, kvn = p.hkv * p.d;
    const Dim fused_width = g.value(sq->inputs[0]).shape.back();
    if (bounds(sq).first == std::vector<int64_t>{0} && bounds(sq).second == std::vector<int64_t>{qn} &&
        bounds(sk).first == std::vector<int64_t>{qn} && bounds(sk).second == std::vector<int64_t>{qn + kvn} &&
        bounds(sv).first == std::vector<int64_t>{qn + kvn} && bounds(sv).second == std::vector<int64_t>{qn + 2 * kvn} &&
        fused_width.is_fixed() && fused_width.value == qn + 2 * kvn)
      p.packed_source = sq->inputs[0];
  }
  return p;
}

std::vector<Plan> plans(const ir::Graph& g, std::vector<std::string>* blockers) {
  std::vector<Plan> out;
  std::set<std::string> seen;
  for (const auto& n : g.nodes()) {
    if (n.op == "CacheUpdate" && seen.insert("static cache").second && blockers)
      blockers->push_back("static cache (GroupQueryAttention shares buffers its own way)");
    if (n.op != "Attention" && n.op != "SoftcapAttention") continue;
    std::string why;
    if (auto p = match(g, n, why)) out.push_back(*p);
    else if (blockers && seen.insert(why).second) blockers->push_back(why);
  }
  return out;
}

// cos/sin caches [rows, r/2]: cos(pos * inv_freq) * attention_scaling in f32, as RopeCosSin computes.
std::pair<Tensor, Tensor> rope_caches(const Tensor& t, const ir::Node& rope, int64_t rows) {
  HFX_CHECK(t.dtype() == DType::F32, "{}: inv_freq is not f32", rope.name);
  const std::vector<float> inv(t.as<float>(), t.as<float>() + t.numel());
  const float scaling = float(rope.attr_float("attention_scaling", 1.0));
  const auto half = int64_t(inv.size());
  std::vector<float> c(size_t(rows * half)), s(size_t(rows * half));
  for (int64_t p = 0; p < rows; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const float f = float(p) * inv[size_t(i)];
      c[size_t(p * half + i)] = std::cos(f);
      s[size_t(p * half + i)] = std::sin(f);
      if (scaling != 1.0f) {
        c[size_t(p * half + i)] *= scaling;
        s[size_t(p * half + i)] *= scaling;
      }
    }
  return {Tensor::from_vector<float>(DType::F32, {rows, half}, c), Tensor::from_vector<float>(DType::F32, {rows, half}, s)};
}

// The same graph without the named input when nothing reads it (position_ids once GroupQueryAttention
// derives positions from the cache).
ir::Graph drop_unused_input(const ir::Graph& g, const std::string& name) {
  const auto uses = ir::use_counts(g);
  ValueId drop = kNone;
  for (auto id : g.inputs())
    if (g.value(id).name == name && uses[size_t(id)] == 0) drop = id;
  if (drop == kNone) return g;
  ir::Graph out(g.name());
  out.symbols() = g.symbols();
  std::vector<ValueId> map(g.num_values(), kNone);
  for (auto id : g.inputs())
    if (id != drop) map[size_t(id)] = out.add_input(g.value(id).name, g.value(id).dtype, g.value(id).shape);
  for (auto id : g.weights()) map[size_t(id)] = out.add_weight(g.value(id).name, *g.weight(id));
  for (const auto& n : g.nodes()) {
    ir::Node m = n;
    for (auto& in : m.inputs) in = in == kNone ? kNone : map[size_t(in)];
    std::vector<ir::Value> outs;
    for (auto o : n.outputs) outs.push_back(g.value(o));
    const ir::Node& added = out.add_node(std::move(m), outs);
    for (size_t i = 0; i < n.outputs.size(); ++i) map[size_t(n.outputs[i])] = added.outputs[i];
  }
  for (auto id : g.outputs()) out.add_output(map[size_t(id)]);
  return out;
}

// A packed weight's name: its first part's, `part` ("q_proj") replaced by `packed` ("qkv_proj"), or that
// name + "." + `suffix` where it does not name the part.
std::string packed_name(const std::string& first, const std::string& part, const std::string& packed,
                        const std::string& suffix) {
  auto at = first.rfind(part);
  if (at == std::string::npos) return first + "." + suffix;
  return first.substr(0, at) + packed + first.substr(at + part.size());
}

// One Linear for `linears` (on one input, of one arity): each weight input the concatenation of theirs
// on the output axis, named after the first's (packed_name); the caller slices its columns back.
ValueId packed_linear(const ir::Graph& g, ir::Rewriter& r, const std::vector<const ir::Node*>& linears,
                      const std::string& part, const std::string& packed, const std::string& suffix) {
  std::vector<ValueId> ins = {r.map(linears.front()->inputs[0])};
  for (size_t i = 1; i < linears.front()->inputs.size(); ++i) {
    std::vector<ir::WeightRef> parts;
    for (const ir::Node* l : linears) parts.push_back(*g.weight(l->inputs[i]));
    const std::string name = packed_name(g.value(linears.front()->inputs[i]).name, part, packed, suffix);
    ins.push_back(r.builder().weight(name, ir::WeightRef::concat(std::move(parts), 0)));
  }
  return r.builder().add1("Linear", ins);
}

// A gated MLP's two input projections, packed into one product by ort_contrib_ops.
struct GateUp {
  const ir::Node* gate;
  const ir::Node* up;
};

// The Linear producing `id` when that Linear's output is read by nothing else.
const ir::Node* sole_linear(const ir::Graph& g, const std::vector<int>& uses, ValueId id) {
  const ir::Node* l = producer(g, id);
  return l && l->op == "Linear" && uses[size_t(id)] == 1 ? l : nullptr;
}

// Gate and up Linears of gated MLPs: SwiGLU(gate, up) or Mul(Gelu(gate), up), both Linears on one input,
// read by nothing else, their weights of one shape and dtype, biased alike. Other activations (ReLU's
// Where, ReLU²) are several nodes and stay as they are. Every column of the packed product is the
// column its own Linear computes, quantized alike (a MatMulNBits column is quantized on its own).
std::vector<GateUp> gate_up_pairs(const ir::Graph& g, const std::vector<int>& uses) {
  std::vector<GateUp> pairs;
  std::set<const ir::Node*> seen;
  auto packable = [&](const ir::Node* gate, const ir::Node* up) {
    if (!gate || !up || gate == up || seen.count(gate) || seen.count(up)) return false;
    if (gate->inputs[0] != up->inputs[0] || gate->inputs.size() != up->inputs.size()) return false;
    for (size_t i = 1; i < gate->inputs.size(); ++i) {
      const ir::WeightRef *a = g.weight(gate->inputs[i]), *b = g.weight(up->inputs[i]);
      if (!a || !b || a->dtype() != b->dtype() || a->shape() != b->shape()) return false;
    }
    return true;
  };
  for (const auto& n : g.nodes()) {
    const ir::Node *gate = nullptr, *up = nullptr;
    if (n.op == "SwiGLU") {
      gate = sole_linear(g, uses, n.inputs[0]);
      up = sole_linear(g, uses, n.inputs[1]);
    } else if (n.op == "Mul") {
      for (size_t i : {0, 1}) {
        const ir::Node* act = producer(g, n.inputs[1 - i]);
        if (!act || act->op != "Gelu" || uses[size_t(n.inputs[1 - i])] != 1) continue;
        gate = sole_linear(g, uses, act->inputs[0]);
        up = sole_linear(g, uses, n.inputs[i]);
        if (gate && up) break;
      }
    }
    if (!packable(gate, up)) continue;
    seen.insert(gate);
    seen.insert(up);
    pairs.push_back({gate, up});
  }
  return pairs;
}

}  // namespace

int64_t ort_rope_cache_bytes(const ir::Graph& graph, int64_t rows) {
  if (rows > kMaxRopeCacheRows) return 0;
  std::set<const ir::Node*> tables;  // one pair (longrope: two) per RopeCosSin, shared by its layers
  int64_t bytes = 0;
  for (const Plan& p : plans(graph, nullptr)) {
    if (!p.rope || p.rope->attr_int("dynamic", 0) || !tables.insert(p.rope).second) continue;
    const int64_t pairs = p.long_inv ? 2 : 1;
    bytes += pairs * 2 * rows * (p.rotary / 2) * int64_t(sizeof(float));
  }
  return bytes;
}

std::vector<std::string> ort_profile_blockers(const ir::Graph& graph) {
  std::vector<std::string> blockers;
  auto found = plans(graph, &blockers);
  if (found.empty() && blockers.empty()) blockers.push_back("no attention to fuse");
  return blockers;
}

// GroupQueryAttention's cos/sin caches [rows, r/2] for the plan's RopeCosSin, in the target graph:
// precomputed weights for a static table; for longrope the first T rows (T = the mask's length) of the
// long pair once T passes the original context (Transformers: max(position_ids) + 1 > original), else of
// the short pair, sliced first so a step copies T rows, not the context; for dynamic NTK the step's T
// rows computed by the model's own RopeCosSin over positions 0..T-1 (its longest position + 1 = T
// rescales the frequencies past max_position, as Transformers' dynamic_rope_update), halved to [T, r/2]:
// no precomputed table, its rows change with T. A table of more than kMaxRopeCacheRows rows (a config's
// max_position_embeddings can say 10^7 and more) is computed the same way, per step in the graph, from
// the fixed frequencies (longrope: the pair picked by T): precomputed, it would grow with the config
// field instead of the weights (16 M rows of a tiny model: a 1 GiB model.onnx).
std::pair<ValueId, ValueId> step_rope_caches(const ir::Graph& graph, ir::Rewriter& r, const Plan& p, ValueId mask,
                                             int64_t rows) {
  ir::Builder& b = r.builder();
  const std::string base = p.rope->name.substr(1, p.rope->name.rfind('/'));  // "model/rotary_emb/"
  std::string stem = base;
  for (auto& ch : stem)
    if (ch == '/') ch = '.';
  auto cache = [&](const Tensor& inv, const std::string& tag) {
    auto [c, s] = rope_caches(inv, *p.rope, rows);
    return std::make_pair(b.weight(stem + "cos_cache" + tag, ir::WeightRef::constant(std::move(c))),
                          b.weight(stem + "sin_cache" + tag, ir::WeightRef::constant(std::move(s))));
  };
  // The step's rows 0..T-1 from the frequencies `inv`: RopeCosSin [1, T, r] halved to [T, r/2].
  auto computed = [&](ValueId inv) {
    const ValueId total = b.squeeze(b.shape_of(mask, 1, 2), {0});
    const ValueId positions = b.unsqueeze(b.add1("Range", {b.i64(0), total, b.i64(1)}), {0});  // [1, T]
    const auto tables = b.add("RopeCosSin", {positions, inv}, p.rope->attrs);  // [1, T, r]
    auto half = [&](ValueId t) { return b.squeeze(b.slice(t, 0, p.rotary / 2, -1), {0}); };
    return std::pair<ValueId, ValueId>{half(tables[0]), half(tables[1])};  // braces: cos's nodes first
  };
  if (p.rope->attr_int("dynamic", 0)) {
    auto s = b.scope(base + "dynamic_ntk");
    return computed(r.mapped(*p.rope).inputs[1]);
  }
  const bool in_graph = rows > kMaxRopeCacheRows;
  if (!p.long_inv) {
    if (!in_graph) return cache(*graph.constant(p.rope->inputs[1]), "");
    auto s = b.scope(base + "computed");
    return computed(r.mapped(*p.rope).inputs[1]);
  }
  auto s = b.scope(base + "longrope");
  const ValueId total = b.shape_of(mask, 1, 2);
  const ValueId is_long = b.add1("Greater", {total, b.i64s({p.longrope_original})});
  if (in_graph) {
    const ValueId inv = b.add1("Where", {is_long, b.weight(stem + "inv_freq_long", ir::WeightRef::constant(*p.long_inv)),
                                         b.weight(stem + "inv_freq_short", ir::WeightRef::constant(*p.short_inv))});
    return computed(inv);
  }
  const auto [short_cos, short_sin] = cache(*p.short_inv, "_short");
  const auto [long_cos, long_sin] = cache(*p.long_inv, "_long");
  auto pick = [&](ValueId long_cache, ValueId short_cache) {
    return b.add1("Where", {is_long, b.add1("Slice", {long_cache, b.i64s({0}), total, b.i64s({0})}),
                            b.add1("Slice", {short_cache, b.i64s({0}), total, b.i64s({0})})});
  };
  return {pick(long_cos, short_cos), pick(long_sin, short_sin)};
}

// Left-padded rows: GroupQueryAttention counts each row's valid keys (seqlens_k) from position 0, so a
// row's new tokens are rolled left by its leading pads (its real tokens first, the pads after them)
// and rolled back before lm_head (roll_back_rows; the logits when no lm_head is found: V floats a
// position instead of H). The cache then holds each row's keys from position 0, which the next step
// reads back by the same count. Unpadded rows roll by 0.
struct LeftPadding {
  ValueId ids_src = kNone, logits_src = kNone;  // source graph
  const ir::Node* lm_head = nullptr;            // the MatMul / Linear the logits come from, per position
  ValueId roll_back = kNone;                    // where each output position's row reads, [B, S]
  ValueId past_real = kNone;                    // each row's real past tokens, [B, 1]
};

// The projection that makes the logits: back from the output through per-position element-wise ops
// (Gemma 2's final soft-cap: Div, Tanh, Mul) to a MatMul or Linear.
const ir::Node* lm_head_of(const ir::Graph& g, ValueId logits) {
  const ir::Node* p = producer(g, logits);
  while (p && (p->op == "Mul" || p->op == "Div" || p->op == "Tanh" || p->op == "Cast"))
    p = producer(g, p->inputs[0]);
  return p && (p->op == "MatMul" || p->op == "Linear") ? p : nullptr;
}

// x[B, S, F] with each row's positions put back where the step's rows had them (pad.roll_back).
ValueId roll_back_rows(ir::Rewriter& r, const LeftPadding& pad, ValueId x) {
  ir::Builder& b = r.builder();
  auto s = b.scope("model/left_padding");
  const ValueId at = b.add1("Expand", {b.unsqueeze(pad.roll_back, {2}), b.add1("Shape", {x})});  // [B, S, F]
  return b.add1("GatherElements", {x, at}, {{"axis", int64_t(1)}});
}

// Each row's new tokens rolled left by its leading pads: row b's position t reads the step's position
// (t + leading_b) mod S, and is put back from (t - leading_b) mod S. In as few nodes as it takes (19):
// they run on every decode step, where the roll is the identity (H13 in docs/benchmarks.md: 45 nodes
// cost 1.6 % of a Qwen3-0.6B step).
LeftPadding roll_left_padding(const ir::Graph& graph, ir::Rewriter& r, std::optional<ValueId> mask_input) {
  LeftPadding out;
  for (auto in : graph.inputs())
    if (graph.value(in).name == "input_ids") out.ids_src = in;
  for (auto o : graph.outputs())
    if (graph.value(o).name == "logits") out.logits_src = o;
  if (out.logits_src != kNone) out.lm_head = lm_head_of(graph, out.logits_src);
  if (out.ids_src == kNone || !mask_input) return out;
  ir::Builder& b = r.builder();
  auto s = b.scope("model/left_padding");
  const ValueId ids = r.map(out.ids_src), mask = r.map(*mask_input);
  const ValueId total = b.shape_of(mask, 1, 2), step = b.shape_of(ids, 1, 2);  // [1] each
  const ValueId fresh = b.add1("Slice", {mask, b.minus(total, step), total, b.i64s({1})});
  const ValueId leading = b.add1("ReduceSum", {b.cast(b.add1("Equal", {b.add1("CumSum", {fresh, b.i64(1)}), b.i64(0)}), DType::I64),
                                               b.i64s({1})});  // [B, 1]
  out.past_real = b.minus(b.add1("ReduceSum", {mask, b.i64s({1})}), b.add1("ReduceSum", {fresh, b.i64s({1})}));
  const ValueId i = b.add1("Range", {b.i64(0), b.squeeze(step, {0}), b.i64(1)});  // [S]
  const ValueId forward = b.add1("Mod", {b.plus(i, leading), step});  // [B, S]
  out.roll_back = b.add1("Mod", {b.minus(i, leading), step});
  r.remap(out.ids_src, b.add1("GatherElements", {ids, forward}, {{"axis", int64_t(1)}}));
  return out;
}

// The logits rolled back to the rows' own (left-padded) positions, under the output's name, for a graph
// whose lm_head was not found (the hidden states are rolled before it otherwise).
void finish_left_padding(ir::Rewriter& r, const LeftPadding& pad) {
  if (pad.roll_back == kNone || pad.logits_src == kNone || pad.lm_head) return;
  const ValueId logits = r.map(pad.logits_src);
  const ValueId back = roll_back_rows(r, pad, logits);
  r.target().rename(logits, "logits_rows_rolled");
  r.target().rename(back, "logits");
  r.remap(pad.logits_src, back);
}

// The heads merged again after an attention: Reshape(Transpose{0,2,1,3}(attention), [b, s, hq * d]), the
// attention's only reader and the transpose's, the pair GroupQueryAttention's [b, s, hq * d] output
// makes moot; nullopt for any other reader. Elided, each layer's decode step runs four nodes fewer (the
// pair, and the Reshape + Transpose that would give GroupQueryAttention's output the attention's layout).
struct MergedHeads {
  const ir::Node* transpose;
  const ir::Node* reshape;
};
std::optional<MergedHeads> merged_heads(const ir::Graph& g, const std::vector<int>& uses,
                                        const std::vector<std::vector<const ir::Node*>>& readers, const Plan& p) {
  auto only_reader = [&](ValueId v) -> const ir::Node* {
    return uses[size_t(v)] == 1 && readers[size_t(v)].size() == 1 ? readers[size_t(v)][0] : nullptr;
  };
  const ir::Node* t = only_reader(p.attention->outputs[0]);
  if (!t || t->op != "Transpose" || !t->has_attr("perm") || t->attr_ints("perm") != std::vector<int64_t>{0, 2, 1, 3})
    return std::nullopt;
  const ir::Node* r = only_reader(t->outputs[0]);
  if (!r || r->op != "Reshape") return std::nullopt;
  const Shape& from = g.value(t->outputs[0]).shape;  // [b, s, hq, d]
  const Shape& to = g.value(r->outputs[0]).shape;
  const Dim merged = Dim::fixed(p.hq * p.d);
  if (from.size() != 4 || to.size() != 3 || !(to[0] == from[0]) || !(to[1] == from[1]) || !(to[2] == merged))
    return std::nullopt;
  return MergedHeads{t, r};
}

ir::Graph ort_contrib_ops(const ir::Graph& graph, const OrtContribOptions& opt) {
  std::vector<std::string> blockers;
  const std::vector<Plan> found = plans(graph, &blockers);
  if (!blockers.empty()) unsupported("ort profile: {}", fmt::join(blockers, "; "));
  HFX_CHECK(opt.rope_cache_rows > 0, "ort profile: rope cache rows not set");

  std::map<const ir::Node*, size_t> by_attention, by_linear;
  std::set<const ir::Node*> deferred;  // the cache appends (or bare k, v): GroupQueryAttention's present outputs
  for (size_t i = 0; i < found.size(); ++i) {
    by_attention[found[i].attention] = i;
    for (size_t j : {1, 2}) deferred.insert(producer(graph, found[i].attention->inputs[j]));
    if (found[i].pack_linears)
      for (const ir::Node* l : {found[i].q.linear, found[i].k.linear, found[i].v.linear}) by_linear[l] = i;
  }
  const std::vector<int> uses = ir::use_counts(graph);
  std::map<const ir::Node*, size_t> by_gate_up;  // gate or up Linear -> its pair
  const std::vector<GateUp> gate_ups = gate_up_pairs(graph, uses);
  for (size_t i = 0; i < gate_ups.size(); ++i)
    if (!by_linear.count(gate_ups[i].gate) && !by_linear.count(gate_ups[i].up)) {
      by_gate_up[gate_ups[i].gate] = i;
      by_gate_up[gate_ups[i].up] = i;
    }
  std::vector<std::vector<const ir::Node*>> readers(graph.num_values());
  for (const auto& n : graph.nodes())
    for (auto in : n.inputs)
      if (in != kNone) readers[size_t(in)].push_back(&n);
  std::map<size_t, MergedHeads> merged;  // plan -> the heads' merge its GroupQueryAttention replaces
  for (size_t i = 0; i < found.size(); ++i)
    if (auto m = merged_heads(graph, uses, readers, found[i])) {
      merged[i] = *m;
      deferred.insert(m->transpose);
      deferred.insert(m->reshape);
    }
  // RMSNorm(Add(a, b)): the Add becomes a SkipSimplifiedLayerNormalization when its sum has the
  // norm's shape (no broadcasting).
  std::map<ValueId, const ir::Node*> skip_norm_of_sum;  // Add output -> the RMSNorm reading it
  for (const auto& n : graph.nodes()) {
    if (n.op != "RMSNorm") continue;
    const ir::Node* add = producer(graph, n.inputs[0]);
    if (!add || add->op != "Add" || !graph.weight(n.inputs[1])) continue;
    const auto& a = graph.value(add->inputs[0]);
    const auto& b = graph.value(add->inputs[1]);
    if (!(a.shape == b.shape) || a.shape.size() != 3 || skip_norm_of_sum.count(n.inputs[0])) continue;
    skip_norm_of_sum[n.inputs[0]] = &n;
  }

  ir::Rewriter r(graph);
  ir::Builder& b = r.builder();
  std::map<size_t, ValueId> packed;            // plan -> packed q | k | v projection (target graph)
  std::map<size_t, ValueId> packed_gate_up;    // pair -> packed gate | up projection (target graph)
  std::map<const ir::Node*, ValueId> normed;   // RMSNorm (source) -> its Skip output (target graph)
  std::map<const ir::Node*, ValueId> caches_cos, caches_sin;
  ValueId seqlens_k = kNone, total_len = kNone;
  std::optional<ValueId> mask_input;
  for (auto id : graph.inputs())
    if (graph.value(id).name == "attention_mask") mask_input = id;
  if (!found.empty() && !mask_input) unsupported("ort profile: the graph has no attention_mask input");

  const LeftPadding pad = roll_left_padding(graph, r, found.empty() ? std::nullopt : mask_input);
  // Learned positions (GPT-2's wpe) read position_ids; GroupQueryAttention's rows start at position 0
  // and continue from each row's real past: past_real + i, so the input goes as for rotary models (GQA
  // places rotary positions itself).
  const bool learned_positions = std::any_of(found.begin(), found.end(), [](const Plan& p) { return !p.rope; });
  for (auto id : graph.inputs())
    if (learned_positions && graph.value(id).name == "position_ids" && pad.past_real != kNone) {
      auto s = b.scope("model/positions_from_mask");
      const ValueId step = b.squeeze(b.shape_of(r.map(pad.ids_src), 1, 2), {0});
      r.remap(id, b.plus(pad.past_real, b.unsqueeze(b.add1("Range", {b.i64(0), step, b.i64(1)}), {0})));
    }

  for (const auto& node : graph.nodes()) {
    if (deferred.count(&node)) continue;  // replaced at its attention
    if (&node == pad.lm_head && pad.roll_back != kNone) {
      ir::Node n = r.mapped(node);
      n.inputs[0] = roll_back_rows(r, pad, n.inputs[0]);
      r.copy(node, n);
      continue;
    }
    if (auto it = by_linear.find(&node); it != by_linear.end()) {
      const Plan& p = found[it->second];
      if (!packed.count(it->second)) {
        auto s = b.scope(scope_of(node.name, 2) + "/qkv_proj");
        packed[it->second] = packed_linear(graph, r, {p.q.linear, p.k.linear, p.v.linear}, "q_proj", "qkv_proj", "qkv");
      }
      const int64_t qn = p.hq * p.d, kvn = p.hkv * p.d;
      const ValueId all = packed[it->second];
      auto s = b.scope(scope_of(node.name));
      ValueId part = &node == p.q.linear ? b.slice(all, 0, qn, -1)
                     : &node == p.k.linear ? b.slice(all, qn, qn + kvn, -1)
                                           : b.slice(all, qn + kvn, qn + 2 * kvn, -1);
      r.replace(node, {part});
      continue;
    }
    if (auto it = by_gate_up.find(&node); it != by_gate_up.end()) {
      const GateUp& pair = gate_ups[it->second];
      if (!packed_gate_up.count(it->second)) {
        auto s = b.scope(scope_of(node.name, 2) + "/gate_up_proj");
        packed_gate_up[it->second] = packed_linear(graph, r, {pair.gate, pair.up}, "gate_proj", "gate_up_proj", "gate_up");
      }
      const int64_t n = graph.weight(pair.gate->inputs[1])->shape()[0];
      const ValueId both = packed_gate_up[it->second];
      auto s = b.scope(scope_of(node.name));
      r.replace(node, {&node == pair.gate ? b.slice(both, 0, n, -1) : b.slice(both, n, 2 * n, -1)});
      continue;
    }
    if (node.op == "Add" && skip_norm_of_sum.count(node.outputs[0])) {
      const ir::Node* norm = skip_norm_of_sum[node.outputs[0]];
      auto s = b.scope(scope_of(norm->name));
      auto outs = b.add("SkipSimplifiedLayerNormalization",
                        {r.map(node.inputs[0]), r.map(node.inputs[1]), r.map(norm->inputs[1])},
                        {{"epsilon", norm->attr_float("epsilon")}});
      normed[norm] = outs[0];
      r.replace(node, {outs[1]});
      continue;
    }
    if (node.op == "RMSNorm") {
      if (auto it = normed.find(&node); it != normed.end()) {
        r.replace(node, {it->second});
        continue;
      }
      auto s = b.scope(scope_of(node.name));
      ir::Node n = r.mapped(node);
      r.replace(node, {b.add1("SimplifiedLayerNormalization", {n.inputs[0], n.inputs[1]},
                              {{"epsilon", node.attr_float("epsilon")}, {"axis", int64_t(-1)}, {"stash_type", int64_t(1)}})});
      continue;
    }
    auto it = by_attention.find(&node);
    if (it == by_attention.end()) {
      r.copy(node, r.mapped(node));
      continue;
    }
    const Plan& p = found[it->second];
    if (seqlens_k == kNone) {
      // Shared by every layer: seqlens_k = sum(mask) - 1 and total_sequence_length = mask length, int32.
      auto s = b.scope("model/attn_mask_reformat");
      ValueId mask = r.map(*mask_input);
      ValueId sum = b.add1("ReduceSum", {mask, b.i64s({1})}, {{"keepdims", int64_t(0)}});
      seqlens_k = b.cast(b.minus(sum, b.i64(1)), DType::I32);
      total_len = b.cast(b.squeeze(b.shape_of(mask, 1, 2), {0}), DType::I32);
    }
    if (p.rope && !caches_cos.count(p.rope))
      std::tie(caches_cos[p.rope], caches_sin[p.rope]) = step_rope_caches(graph, r, p, r.map(*mask_input), opt.rope_cache_rows);
    auto s = b.scope(scope_of(node.name));
    auto flat = [&](const Side& side, int64_t heads) {
      if (side.flat != kNone) return r.map(side.flat);
      if (side.heads4 == kNone) return b.reshape(b.transpose(r.map(side.bhsd), {0, 2, 1, 3}), {0, 0, heads * p.d});
      return b.reshape(r.map(side.heads4), {0, 0, heads * p.d});
    };
    std::vector<ValueId> ins;
    // Without norms GQA reads the packed projection; with them, q, k, v as the (sliced) norm chains left them.
    const bool no_norms = p.q.flat != kNone && p.k.flat != kNone && p.v.flat != kNone && !p.q.normed &&
                          !p.k.normed && !p.v.normed;
    if (no_norms && p.packed_source != kNone) ins = {r.map(p.packed_source), kNone, kNone};
    else if (no_norms && p.pack_linears) ins = {packed.at(it->second), kNone, kNone};
    else ins = {flat(p.q, p.hq), flat(p.k, p.hkv), flat(p.v, p.hkv)};
    ins.push_back(r.map(p.past_k));
    ins.push_back(r.map(p.past_v));
    ins.insert(ins.end(), {seqlens_k, total_len});
    if (p.rope) ins.insert(ins.end(), {caches_cos[p.rope], caches_sin[p.rope]});
    ir::Attrs attrs = {{"num_heads", p.hq}, {"kv_num_heads", p.hkv}, {"scale", node.attr_float("scale")}};
    if (p.rope) {
      attrs["do_rotary"] = int64_t(1);
      attrs["rotary_interleaved"] = int64_t(p.interleaved);
    }
    if (p.softcap > 0) attrs["softcap"] = p.softcap;
    if (p.window > 0) attrs["local_window_size"] = p.window;
    auto outs = b.add("GroupQueryAttention", ins, attrs);
    if (auto m = merged.find(it->second); m != merged.end()) {
      // GroupQueryAttention's [b, s, hq * d] is what the merge computed.
      r.remap(node.outputs[0], outs[0]);
      r.remap(m->second.transpose->outputs[0], outs[0]);
      r.replace(*m->second.reshape, {outs[0]});
    } else {
      // The attention's [b, hq, s, d] value, for whatever reads it.
      r.replace(node, {b.transpose(b.reshape(outs[0], {0, 0, p.hq, p.d}), {0, 2, 1, 3})});
    }
    r.replace(*producer(graph, node.inputs[1]), {outs[1]});
    r.replace(*producer(graph, node.inputs[2]), {outs[2]});
  }
  finish_left_padding(r, pad);
  ir::Graph out = drop_unused_input(r.finish(), "position_ids");
  // Precomputed cos/sin caches serve the positions they have rows for. The contract says so, so `hfx
  // run`, `hfx generate` and verify stop at a named bound, not at an out-of-range Gather inside GQA.
  const bool precomputed =
      opt.rope_cache_rows <= kMaxRopeCacheRows &&
      std::any_of(found.begin(), found.end(), [](const Plan& p) { return p.rope && !p.rope->attr_int("dynamic", 0); });
  const std::string total = "total_sequence_length";
  if (precomputed && out.symbols().has(total)) {
    SymbolBounds bounds = out.symbols().bounds(total);
    if (!bounds.max || *bounds.max > opt.rope_cache_rows) {
      bounds.max = opt.rope_cache_rows;
      out.symbols().set_bounds(total, bounds);
    }
  }
  return out;
}

}  // namespace hfx::passes
