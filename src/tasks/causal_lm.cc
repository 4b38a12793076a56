#include "tasks/causal_lm.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "ir/builder.h"
#include "tasks/seq2seq.h"
#include "tasks/task.h"

namespace hfx::tasks {

namespace {

const std::string kBatch = "batch_size";
const std::string kSeq = "sequence_length";
const std::string kPast = "past_sequence_length";
const std::string kTotal = "total_sequence_length";

enum class Step { Any, Prefill, Decode };

struct Layout {
  Step step;
  bool static_cache;
  int64_t max_cache_len;
};

Dim seq_dim(const Layout& l) { return l.step == Step::Decode ? Dim::fixed(1) : Dim::sym(kSeq); }

// Length of the cache a step reads and of the one it returns.
Dim past_len(const Layout& l) { return l.static_cache ? Dim::fixed(l.max_cache_len) : Dim::sym(kPast); }
Dim present_len(const Layout& l) {
  if (l.static_cache) return Dim::fixed(l.max_cache_len);
  return l.step == Step::Prefill ? Dim::sym(kSeq) : Dim::sym(kTotal);
}
bool has_past(const Layout& l) { return l.static_cache || l.step != Step::Prefill; }

// The state the model declares for this layout, named by the client set it names.
std::vector<StatePort> cache_ports(const models::CausalLm& model, const Layout& l) {
  return name_states(model.states({l.static_cache, l.max_cache_len, kPast}), state_names_named(model.state_names()));
}

// Where a model's build() reads (writes) the state of `kind`: its per-layer slot.
std::vector<ir::ValueId>& past_slot(models::CausalLmInputs& in, StateKind kind) {
  switch (kind) {
    case StateKind::SelfAttentionKey: return in.past_key;
    case StateKind::SelfAttentionValue: return in.past_value;
    case StateKind::Convolution: return in.past_conv;
    case StateKind::Recurrent: return in.past_ssm;
    default: unsupported("the causal-LM task carries no {} yet", state_kind_name(kind));
  }
}
const std::vector<ir::ValueId>& present_slot(const models::CausalLmOutputs& out, StateKind kind) {
  switch (kind) {
    case StateKind::SelfAttentionKey: return out.present_key;
    case StateKind::SelfAttentionValue: return out.present_value;
    case StateKind::Convolution: return out.present_conv;
    case StateKind::Recurrent: return out.present_ssm;
    default: unsupported("the causal-LM task carries no {} yet", state_kind_name(kind));
  }
}

std::vector<IoSpec> inputs_of(const std::vector<StatePort>& state, const Layout& l) {
  const Dim mask_len = l.static_cache ? Dim::fixed(l.max_cache_len) : l.step == Step::Prefill ? Dim::sym(kSeq) : Dim::sym(kTotal);
  std::vector<IoSpec> io = {
      {"input_ids", DType::I64, {Dim::sym(kBatch), seq_dim(l)}},
      {"attention_mask", DType::I64, {Dim::sym(kBatch), mask_len}},
      {"position_ids", DType::I64, {Dim::sym(kBatch), seq_dim(l)}},
  };
  if (has_past(l))
    for (const auto& p : state) io.push_back({p.past, p.spec.dtype, state_shape(p.spec, past_len(l))});
  if (l.static_cache) io.push_back({"cache_position", DType::I64, {seq_dim(l)}});
  return io;
}

std::vector<IoSpec> outputs_of(const models::CausalLm& model, const std::vector<StatePort>& state, const Layout& l) {
  std::vector<IoSpec> io = {{"logits", DType::F32, {Dim::sym(kBatch), seq_dim(l), Dim::fixed(model.summary().vocab_size)}}};
  for (const auto& p : state) io.push_back({p.present, p.spec.dtype, state_shape(p.spec, present_len(l))});
  return io;
}

void declare_bounds(ir::Graph& graph, const CausalLmOptions& o) {
  auto& syms = graph.symbols();
  if (!o.dynamic) {
    // Defaults: what any step needs to be meaningful; upper bounds only where the user gives them.
    syms.set_bounds(kBatch, {1, std::nullopt});
    syms.set_bounds(kSeq, {1, std::nullopt});
    syms.set_bounds(kPast, {0, std::nullopt});
    syms.set_bounds(kTotal, {1, std::nullopt});
    for (const auto& [name, b] : o.dims) syms.set_bounds(name, b);
  }
  keep_used_symbols(graph);
}

Component build_component(const models::CausalLm& model, const CausalLmOptions& o, Step step, std::string role,
                          std::string stem) {
  const Layout l{step, o.static_cache, o.max_cache_len};
  std::vector<StatePort> state = cache_ports(model, l);
  Component c{std::move(role), std::move(stem), ir::Graph("main"), inputs_of(state, l), outputs_of(model, state, l), {}, {}};
  ir::Graph& graph = c.graph;
  graph.symbols().relate_sum(kTotal, kPast, kSeq);
  std::map<std::string, ir::ValueId> ids;
  for (const auto& spec : c.inputs) ids[spec.name] = graph.add_input(spec.name, spec.dtype, spec.shape);
  models::CausalLmInputs in;
  in.input_ids = ids.at("input_ids");
  in.attention_mask = ids.at("attention_mask");
  in.position_ids = ids.at("position_ids");
  if (has_past(l))
    for (const auto& p : state) {
      // Per layer, kNone where a layer has no state of this kind (a hybrid's other layers).
      auto& slot = past_slot(in, p.spec.kind);
      if (slot.size() <= size_t(p.spec.layer)) slot.resize(size_t(p.spec.layer) + 1, ir::kNone);
      slot[size_t(p.spec.layer)] = ids.at(p.past);
    }
  if (l.static_cache) in.cache_position = ids.at("cache_position");
  ir::Builder b(graph);
  models::CausalLmOutputs out = model.build(b, in);

  // Name the outputs by the contract and declare their shapes: the contract is what runtimes bind to.
  std::vector<ir::ValueId> values = {out.logits};
  for (const auto& p : state) {
    const auto& presents = present_slot(out, p.spec.kind);
    HFX_CHECK(size_t(p.spec.layer) < presents.size() && presents[size_t(p.spec.layer)] != ir::kNone,
              "the model returned no {} for layer {}", state_kind_name(p.spec.kind), p.spec.layer);
    values.push_back(presents[size_t(p.spec.layer)]);
  }
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    ir::ValueId v = values[i];
    // An output that is a graph input as is (never the case today) would need an Identity to be renamed.
    HFX_CHECK(graph.value(v).producer >= 0, "output {} is not computed", c.outputs[i].name);
    graph.rename(v, c.outputs[i].name);
    graph.value(v).shape = c.outputs[i].shape;
    graph.add_output(v);
  }
  c.shared_buffers = shared_buffers_of(state);
  c.state = std::move(state);
  declare_bounds(graph, o);
  graph.validate();
  return c;
}

}  // namespace

const std::vector<std::string>& causal_lm_dim_names() {
  static const std::vector<std::string> names = {kBatch, kSeq, kPast, kTotal};
  return names;
}

namespace {

// A dim's bounds with the defaults declare_bounds gives it; hi absent: unbounded.
struct Range {
  int64_t lo;
  std::optional<int64_t> hi;
};

Range range_of(const CausalLmOptions& o, const std::string& name) {
  Range r{name == kPast ? 0 : 1, std::nullopt};
  if (auto it = o.dims.find(name); it != o.dims.end()) {
    if (it->second.min) r.lo = *it->second.min;
    r.hi = it->second.max;
  }
  return r;
}

// total = past + sequence: every bound must be reachable by some step inside the others, or the
// contract says something no runtime can honour (and the check's own shapes would break it).
void check_sum_relation(const CausalLmOptions& o) {
  const Range seq = range_of(o, kSeq), past = range_of(o, kPast), total = range_of(o, kTotal);
  if (total.hi && past.hi && *past.hi + seq.lo > *total.hi)
    bad_input("--dim {} max {} contradicts {} max {}: {} = {} + {} (min {}), so a cache of {} needs a total of {}; "
              "lower {} to at most {} or raise {} to at least {}",
              kPast, *past.hi, kTotal, *total.hi, kTotal, kPast, kSeq, seq.lo, *past.hi, *past.hi + seq.lo, kPast,
              *total.hi - seq.lo, kTotal, *past.hi + seq.lo);
  if (total.hi && seq.hi && *seq.hi + past.lo > *total.hi)
    bad_input("--dim {} max {} contradicts {} max {}: {} = {} (min {}) + {}, so {} new tokens need a total of {}; "
              "lower {} to at most {} or raise {} to at least {}",
              kSeq, *seq.hi, kTotal, *total.hi, kTotal, kPast, past.lo, kSeq, *seq.hi, *seq.hi + past.lo, kSeq,
              *total.hi - past.lo, kTotal, *seq.hi + past.lo);
  if (total.hi && *total.hi < past.lo + seq.lo)
    bad_input("--dim {} max {} is below {} min {} + {} min {}: no step fits", kTotal, *total.hi, kPast, past.lo, kSeq, seq.lo);
  if (past.hi && seq.hi && total.lo > *past.hi + *seq.hi)
    bad_input("--dim {} min {} is above {} max {} + {} max {}: no step fits", kTotal, total.lo, kPast, *past.hi, kSeq, *seq.hi);
}

}  // namespace

void validate(const CausalLmOptions& o) {
  for (const auto& [name, b] : o.dims) {
    // Every task's dims are known here; each task refuses the others' (tasks/seq2seq.cc).
    const auto& names = causal_lm_dim_names();
    const auto& seq2seq = seq2seq_dim_names();
    if (std::find(names.begin(), names.end(), name) == names.end() &&
        std::find(seq2seq.begin(), seq2seq.end(), name) == seq2seq.end())
      bad_input("--dim {}: unknown dim (known: {}; an encoder-decoder's: {})", name, fmt::join(names, ", "),
                fmt::join(seq2seq, ", "));
    if (b.min && b.max && *b.min > *b.max) bad_input("--dim {}: min {} is above max {}", name, *b.min, *b.max);
    // A step has a row, a new token and something to attend to; only the cache may be empty.
    if (!name.starts_with("past_") && ((b.min && *b.min < 1) || (b.max && *b.max < 1)))
      bad_input("--dim {}={}:{}: {} is at least 1 (a step has at least one {})", name, b.min ? fmt::format("{}", *b.min) : "",
                b.max ? fmt::format("{}", *b.max) : "", name, name == kBatch ? "row" : "token");
  }
  check_sum_relation(o);
  if (o.static_cache && o.max_cache_len <= 0) bad_input("--static-cache needs --max-cache-len N (N > 0)");
  // The static cache is allocated whole (2 x layers x max_cache_len x kv heads x head_dim floats, by
  // the verification and by every runtime): a length past any model's context is a typo, not a plan.
  if (o.max_cache_len > kMaxCacheLen)
    bad_input("--max-cache-len {}: above the limit of {} (2^24) tokens; the static cache is allocated whole at that "
              "length, so give the longest sequence the export must serve (at most the model's max_position_embeddings)",
              o.max_cache_len, kMaxCacheLen);
  if (!o.static_cache && o.max_cache_len > 0) bad_input("--max-cache-len is only meaningful with --static-cache");
  if (o.dynamic && !o.dims.empty()) bad_input("--dynamic and --dim contradict each other: --dynamic drops all bounds");
}

std::optional<ContextLimit> model_context(const io::JsonFile& config, const std::vector<Component>& built) {
  ContextLimit limit;
  for (const char* field : {"max_position_embeddings", "n_positions"})
    if (auto n = io::optional_int(config, config.json, field, 1)) {
      limit = {*n, field, false};
      break;
    }
  if (limit.field.empty()) return std::nullopt;
  bool rotary = false, reads_positions = false;
  for (const auto& c : built) {
    ir::ValueId positions = ir::kNone;
    for (ir::ValueId id : c.graph.inputs())
      if (c.graph.value(id).name == "position_ids") positions = id;
    for (const auto& node : c.graph.nodes()) {
      if (node.op == "RopeCosSin") {
        if (node.attr_int("dynamic", 0)) return std::nullopt;
        rotary = true;
      }
      if (positions != ir::kNone)
        reads_positions = reads_positions || std::find(node.inputs.begin(), node.inputs.end(), positions) != node.inputs.end();
    }
  }
  // A model that reads no positions (a state-space model, attention without rope) has no context
  // to keep within: max_position_embeddings is nominal there, as Transformers runs it.
  if (!reads_positions) return std::nullopt;
  limit.learned = !rotary;
  return limit;
}

std::vector<std::string> fit_to_context(CausalLmOptions& o, const ContextLimit& limit) {
  std::vector<std::string> warnings;
  const std::string past_it = fmt::format("is beyond {} {}", limit.field, limit.positions);
  const std::string kept = "kept: rotary positions extrapolate, as Transformers runs them, but the model was not trained there";
  auto check = [&](const std::string& what, int64_t value, int64_t most, auto lower) {
    if (value <= most) return;
    if (!limit.learned) {
      warnings.push_back(fmt::format("{} {} {} ({})", what, value, past_it, kept));
      return;
    }
    warnings.push_back(fmt::format("{} {} {} (a learned position table); using {}", what, value, past_it, most));
    lower(most);
  };
  for (const auto& [dim, most] : {std::pair{kTotal, limit.positions}, std::pair{kSeq, limit.positions},
                                  std::pair{kPast, limit.positions - 1}}) {
    auto it = o.dims.find(dim);
    if (it == o.dims.end()) continue;
    SymbolBounds& b = it->second;
    if (limit.learned && b.min && *b.min > most)
      bad_input("--dim {} min {} {}: a learned position table has no positions there", dim, *b.min, past_it);
    if (b.max) check(fmt::format("--dim {} max", dim), *b.max, most, [&](int64_t m) { b.max = m; });
  }
  if (o.static_cache) check("--max-cache-len", o.max_cache_len, limit.positions, [&](int64_t m) { o.max_cache_len = m; });
  if (limit.learned && !warnings.empty()) validate(o);
  return warnings;
}

std::vector<Component> build_causal_lm(const models::CausalLm& model, const CausalLmOptions& o) {
  validate(o);
  for (const auto& [name, b] : o.dims) {
    const auto& names = causal_lm_dim_names();
    if (std::find(names.begin(), names.end(), name) == names.end())
      bad_input("--dim {}: a decoder's dims are {}", name, fmt::join(names, ", "));
  }
  if (!o.split_prefill) return {build_component(model, o, Step::Any, "decoder", "model")};
  std::vector<Component> out;
  out.push_back(build_component(model, o, Step::Prefill, "prefill", "prefill"));
  out.push_back(build_component(model, o, Step::Decode, "decode", "decode"));
  return out;
}

namespace {

class CausalLmTask final : public Task {
 public:
  const std::string& name() const override {
    static const std::string n = "causal-lm";
    return n;
  }
  std::vector<models::ModuleKind> needs() const override { return {models::ModuleKind::Decoder}; }
  std::vector<std::string> roles() const override { return {"decoder", "prefill", "decode"}; }
  bool generative() const override { return true; }
  std::string contract_summary() const override { return "decoder step, symbolic query axis"; }
  std::vector<Component> components(const models::Model& model, const CausalLmOptions& options) const override {
    return build_causal_lm(model.decoder(), options);
  }
};

}  // namespace

const Task& causal_lm_task() {
  static const CausalLmTask task;
  return task;
}

}  // namespace hfx::tasks
