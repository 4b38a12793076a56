#include "runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <set>

#include "core/error.h"
#include "ir/builder.h"
#include "ir/ops.h"
#include "runtime/kernels.h"

namespace hfx::runtime {

using detail::KernelFn;

namespace {

bool is_composite(const std::string& op) { return ir::is_known_op(op) && ir::op_schema(op).composite; }

// Whether a node of `op` runs through its decomposition rather than a kernel.
bool decomposes(const std::string& op, bool use_composite_kernels) {
  if (!is_composite(op)) return false;
  return !use_composite_kernels || !detail::composite_kernels().count(op);
}

// Copies `src` into a new graph, replacing the composite nodes that `decomposes` selects with their
// decompositions. `map` receives each source value's id in the new graph. Copied values get an "@"
// prefix so they cannot collide with the names the Builder gives decomposition values ("/const/...",
// "/decomposed/..."); names in the new graph only serve diagnostics.
ir::Graph expand(const ir::Graph& src, bool use_composite_kernels, std::vector<ir::ValueId>& map, bool& changed) {
  ir::Graph dst(src.name());
  dst.symbols() = src.symbols();
  ir::Builder b(dst);
  map.assign(src.num_values(), ir::kNone);
  changed = false;
  for (auto id : src.inputs()) {
    const auto& v = src.value(id);
    map[size_t(id)] = dst.add_input("@" + v.name, v.dtype, v.shape);
  }
  for (auto id : src.weights()) map[size_t(id)] = dst.add_weight("@" + src.value(id).name, *src.weight(id));
  for (const auto& node : src.nodes()) {
    ir::Node n = node;
    for (auto& in : n.inputs) in = in == ir::kNone ? ir::kNone : map[size_t(in)];
    if (decomposes(node.op, use_composite_kernels)) {
      const auto& schema = ir::op_schema(node.op);
      if (!schema.decompose)
        unsupported("reference executor: no kernel for op {} (node {}) and no decomposition", node.op, node.name);
      auto scope = b.scope("decomposed" + (node.name.starts_with("/") ? node.name : "/" + node.name));
      auto outs = with_context("decomposing node " + node.name, [&] { return schema.decompose(b, n); });
      HFX_CHECK(outs.size() == node.outputs.size(), "decomposition of {} ({}) gave {} values for {} outputs", node.name,
                node.op, outs.size(), node.outputs.size());
      for (size_t i = 0; i < outs.size(); ++i) map[size_t(node.outputs[i])] = outs[i];
      changed = true;
    } else {
      std::vector<ir::Value> outs;
      for (auto o : node.outputs) {
        ir::Value v = src.value(o);
        v.name = "@" + v.name;
        outs.push_back(std::move(v));
      }
      const auto& added = dst.add_node(std::move(n), outs);
      for (size_t i = 0; i < node.outputs.size(); ++i) map[size_t(node.outputs[i])] = added.outputs[i];
    }
  }
  for (auto id : src.outputs()) dst.add_output(map[size_t(id)]);
  return dst;
}

bool has_decomposable(const ir::Graph& g, bool use_composite_kernels) {
  for (const auto& n : g.nodes())
    if (decomposes(n.op, use_composite_kernels)) return true;
  return false;
}

}  // namespace

struct Executor::Impl {
  ExecOptions options;
  ir::Graph source;                 // the graph as given: input contract, value names
  std::optional<ir::Graph> expanded;  // with composite ops decomposed, when any are
  const ir::Graph* exec = nullptr;  // the graph that runs: `expanded` or `source`
  std::vector<ir::ValueId> map;     // source value id -> exec value id
  std::vector<KernelFn> kernels;    // per exec node
  std::vector<int32_t> last_use;    // per exec value: index of the last node reading it
  std::vector<std::pair<std::string, ir::ValueId>> results;  // returned values: source name, exec id
  // Values that depend on weights only (weights, and outputs of nodes reading only such values) are
  // computed in the first run and cached; later runs skip those nodes. A constant value is cached
  // only when a node that depends on the inputs (or the result) reads it, so a weight consumed only
  // by folding (e.g. transposed by a decomposed Linear) is not kept next to its folded form.
  std::vector<std::shared_ptr<const Tensor>> cache;  // per exec value id
  std::vector<bool> constant_node;                  // per exec node
  bool folded = false;                              // a run completed: constant values are cached
  std::vector<bool> keep_cached;                    // per exec value
  // Without the weight cache (ExecOptions::cache_weights = false) a constant value is computed where a
  // node reads it, from its producer (or the weight), and dropped right after that node: a tied table
  // read by the embedding's Gather and by lm_head is read twice rather than held through the run.
  std::vector<bool> is_const;                       // per exec value: depends on weights only
  // Per exec value: a weight only read as packed bytes (detail::reads_packed_bytes): kept as its uint8 bytes.
  std::vector<bool> packed_bytes;
  std::vector<int32_t> producer;                    // per exec value: the node computing it, or -1
  // A weight a node reads in place (kernels_stored.cc): the input it fills, where its stored bytes are,
  // and the weight (whose pages a streamed run releases after the node). The Transposes and widening
  // Casts between the weight and the node are folded into `matrix` and not run for this reader.
  struct StoredInput {
    size_t input;
    ir::StoredMatrix matrix;
    const ir::WeightRef* weight;
    bool kept_mapped = false;  // streamed, its pages stay mapped between runs (ExecOptions::kept_packed_bytes)
  };
  std::vector<std::optional<StoredInput>> stored;   // per exec node
  std::vector<bool> needed;                         // per exec node: some result depends on what it computes

  explicit Impl(const ir::Graph& graph, ExecOptions opts) : options(std::move(opts)), source(graph) {
    source.validate();
    map.resize(source.num_values());
    for (size_t i = 0; i < map.size(); ++i) map[i] = ir::ValueId(i);
    exec = &source;
    for (int pass = 0; has_decomposable(*exec, options.use_composite_kernels); ++pass) {
      HFX_CHECK(pass < 8, "decompositions of graph {} do not terminate", source.name());
      std::vector<ir::ValueId> step;
      bool changed = false;
      ir::Graph next = expand(*exec, options.use_composite_kernels, step, changed);
      for (auto& m : map) m = m == ir::kNone ? ir::kNone : step[size_t(m)];
      expanded = std::move(next);
      exec = &*expanded;
    }

    const auto& nodes = exec->nodes();
    kernels.resize(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      const auto& n = nodes[i];
      const auto& table = is_composite(n.op) ? detail::composite_kernels() : detail::primitive_kernels();
      auto it = table.find(n.op);
      if (it == table.end()) unsupported("reference executor: no kernel for op {} (node {})", n.op, n.name);
      kernels[i] = it->second;
    }

    for (auto id : source.outputs()) results.emplace_back(source.value(id).name, map[size_t(id)]);
    for (const auto& name : options.keep_values) {
      auto id = source.find(name);
      if (!id) bad_input("keep_values: the graph has no value named `{}`", name);
      results.emplace_back(name, map[size_t(*id)]);
    }

    last_use.assign(exec->num_values(), -1);
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (auto in : nodes[i].inputs)
        if (in != ir::kNone) last_use[size_t(in)] = int32_t(i);
      for (auto out : nodes[i].outputs) last_use[size_t(out)] = std::max(last_use[size_t(out)], int32_t(i));
    }
    for (const auto& [name, id] : results) last_use[size_t(id)] = INT32_MAX;

    is_const.assign(exec->num_values(), false);
    producer.assign(exec->num_values(), -1);
    for (size_t i = 0; i < nodes.size(); ++i)
      for (auto out : nodes[i].outputs) producer[size_t(out)] = int32_t(i);
    for (auto id : exec->weights()) is_const[size_t(id)] = true;
    packed_bytes.assign(exec->num_values(), false);
    for (auto id : exec->weights()) packed_bytes[size_t(id)] = true;
    for (const auto& n : nodes)
      for (size_t j = 0; j < n.inputs.size(); ++j)
        if (n.inputs[j] != ir::kNone && !detail::reads_packed_bytes(n, j)) packed_bytes[size_t(n.inputs[j])] = false;
    for (const auto& [name, id] : results) packed_bytes[size_t(id)] = false;
    constant_node.assign(nodes.size(), false);
    keep_cached.assign(exec->num_values(), false);
    for (size_t i = 0; i < nodes.size(); ++i) {
      bool c = true;
      for (auto in : nodes[i].inputs)
        if (in != ir::kNone && !is_const[size_t(in)]) c = false;
      constant_node[i] = c;
      for (auto out : nodes[i].outputs) is_const[size_t(out)] = c;
    }
    stored.resize(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      auto at = detail::stored_weight_input(nodes[i]);
      if (constant_node[i] || !at || *at >= nodes[i].inputs.size() || nodes[i].inputs[*at] == ir::kNone) continue;
      auto m = stored_operand(nodes[i].inputs[*at]);
      if (!m) m = packed_operand(nodes[i].inputs[*at]);
      if (m && detail::reads_in_place(nodes[i], m->first))
        stored[i] = StoredInput{*at, m->first, m->second};
    }
    keep_packed_pages_mapped();
    mark_needed();
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (constant_node[i] || !needed[i]) continue;
      for (size_t j = 0; j < nodes[i].inputs.size(); ++j) {
        const auto in = nodes[i].inputs[j];
        if (in != ir::kNone && is_const[size_t(in)] && !input_read_in_place(i, j)) keep_cached[size_t(in)] = true;
      }
    }
    for (const auto& [name, id] : results)
      if (is_const[size_t(id)]) keep_cached[size_t(id)] = true;
    if (!options.cache_weights) keep_only_small_weights();
    cache.resize(exec->num_values());
  }

  // Streamed, a run reads each weight where a node needs it and drops it after; the small ones (norm
  // scales, rotary tables, shape constants: a few MiB in all) are kept instead, as reading them again
  // would cost a copy and an allocation per reader per run for no memory worth saving.
  void keep_only_small_weights() {
    constexpr int64_t kSmallWeightsBytes = int64_t(64) << 20;
    int64_t kept = 0;
    for (size_t id = 0; id < keep_cached.size(); ++id) {
      const ir::WeightRef* w = keep_cached[id] ? exec->weight(ir::ValueId(id)) : nullptr;
      const int64_t bytes = w ? numel_of(w->shape()) * 8 : 0;  // at most 8 bytes an element once converted
      keep_cached[id] = w && kept + bytes <= kSmallWeightsBytes;
      if (keep_cached[id]) kept += bytes;
    }
  }

  bool input_read_in_place(size_t node, size_t input) const { return stored[node] && stored[node]->input == input; }

  // Marks the packed weights a streamed run keeps mapped: in graph order, while their bytes fit
  // ExecOptions::kept_packed_bytes.
  void keep_packed_pages_mapped() {
    if (options.cache_weights) return;
    int64_t kept = 0;
    for (auto& s : stored) {
      if (!s || s->matrix.dtype != DType::U8) continue;
      const int64_t bytes = s->matrix.rows * s->matrix.cols;
      if (kept + bytes > options.kept_packed_bytes) break;
      kept += bytes;
      s->kept_mapped = true;
    }
  }
  // Whether a streamed run releases node i's stored weight after the node.
  bool releases_after(size_t i) const { return stored[i] && !options.cache_weights && !stored[i]->kept_mapped; }

  // The weight `id` is, read through Transposes and widening Casts of the graph: its stored matrix and
  // the WeightRef it comes from; nullopt when any step changes values (a rounding Cast) or is not 2-D.
  std::optional<std::pair<ir::StoredMatrix, const ir::WeightRef*>> stored_operand(ir::ValueId id) const {
    if (const ir::WeightRef* w = exec->weight(id)) {
      auto m = w->stored_matrix();
      if (!m) return std::nullopt;
      return std::make_pair(*m, w);
    }
    const int32_t p = producer[size_t(id)];
    if (p < 0) return std::nullopt;
    const ir::Node& n = exec->nodes()[size_t(p)];
    if (n.inputs.size() != 1 || n.inputs[0] == ir::kNone) return std::nullopt;
    auto inner = stored_operand(n.inputs[0]);
    if (!inner) return std::nullopt;
    if (n.op == "Transpose") {
      const auto perm = n.has_attr("perm") ? n.attr_ints("perm") : std::vector<int64_t>{1, 0};
      if (perm == std::vector<int64_t>{1, 0}) inner->first.transposed = !inner->first.transposed;
      else if (perm != std::vector<int64_t>{0, 1}) return std::nullopt;
      return inner;
    }
    if (n.op == "Cast") {  // exact only as a widening, or a cast to the stored half type itself
      const auto to = detail::cast_target(n);
      if (to && (*to == DType::F32 || *to == inner->first.dtype)) return inner;
    }
    return std::nullopt;
  }

  // The weight `id` is when it is packed bytes as stored (U8, no transform; never through a graph's
  // Transpose or Cast): those bytes as a matrix of one row per index of the first axis (MatMulNBits' B: a
  // row of blocks per column of W). Which node reads it so is detail::reads_in_place's to say.
  std::optional<std::pair<ir::StoredMatrix, const ir::WeightRef*>> packed_operand(ir::ValueId id) const {
    const ir::WeightRef* w = exec->weight(id);
    if (!w || w->dtype() != DType::U8 || w->shape().empty()) return std::nullopt;
    const auto raw = w->raw_bytes();
    if (!raw || w->shape()[0] == 0) return std::nullopt;
    const int64_t rows = w->shape()[0];
    return std::make_pair(ir::StoredMatrix{raw->data(), DType::U8, rows, int64_t(raw->size()) / rows, false}, w);
  }

  // A node is needed when a result depends on it through a value that is not read in place: the
  // Transpose and Cast chains folded into a StoredInput are skipped.
  void mark_needed() {
    const auto& nodes = exec->nodes();
    std::vector<bool> read(exec->num_values(), false);
    for (const auto& [name, id] : results) read[size_t(id)] = true;
    needed.assign(nodes.size(), true);
    for (size_t i = nodes.size(); i-- > 0;) {
      if (constant_node[i]) {
        bool used = false;
        for (auto out : nodes[i].outputs) used = used || read[size_t(out)];
        needed[i] = used;
      }
      if (!needed[i]) continue;
      for (size_t j = 0; j < nodes[i].inputs.size(); ++j)
        if (nodes[i].inputs[j] != ir::kNone && !input_read_in_place(i, j)) read[size_t(nodes[i].inputs[j])] = true;
    }
  }

  // Symbol -> (value, "input X dim D") as bound by the inputs of one run.
  struct Binding {
    int64_t value;
    std::string input;
  };
  using Bindings = std::map<std::string, Binding>;

  Bindings validate_inputs(const std::map<std::string, Tensor>& inputs) const {
    std::vector<std::string> names;
    for (auto id : source.inputs()) names.push_back(source.value(id).name);
    for (const auto& [name, t] : inputs)
      if (std::find(names.begin(), names.end(), name) == names.end())
        bad_input("unknown input `{}` (the graph's inputs are {})", name, fmt::join(names, ", "));
    Bindings bound;
    const auto& symbols = source.symbols();
    for (auto id : source.inputs()) {
      const auto& v = source.value(id);
      auto it = inputs.find(v.name);
      if (it == inputs.end()) bad_input("missing input `{}` (the graph's inputs are {})", v.name, fmt::join(names, ", "));
      const Tensor& t = it->second;
      if (t.dtype() != v.dtype)
        bad_input("input {} has dtype {} but the graph expects {}", v.name, dtype_name(t.dtype()), dtype_name(v.dtype));
      if (t.rank() != int64_t(v.shape.size()))
        bad_input("input {} has rank {} (shape {}) but the graph expects rank {} ({})", v.name, t.rank(),
                  detail::shape_string(t.shape()), v.shape.size(), shape_str(v.shape));
      for (size_t d = 0; d < v.shape.size(); ++d) {
        const Dim& dim = v.shape[d];
        const int64_t got = t.shape()[d];
        if (dim.is_fixed()) {
          if (got != dim.value)
            bad_input("input {} dim {} = {} but the graph fixes it to {}", v.name, d, got, dim.value);
        } else if (dim.is_symbol()) {
          auto b = bound.find(dim.symbol);
          if (b != bound.end()) {
            if (b->second.value != got)
              bad_input("input {} dim {} (`{}`) = {} but {} gave {}", v.name, d, dim.symbol, got, b->second.input,
                        b->second.value);
          } else {
            symbols.check(dim.symbol, got, fmt::format("input {} dim {}", v.name, d));
            bound.emplace(dim.symbol, Binding{got, v.name});
          }
        }
      }
    }
    for (const auto& r : symbols.relations()) {
      auto s = bound.find(r.sum), a = bound.find(r.a), b = bound.find(r.b);
      if (s == bound.end() || a == bound.end() || b == bound.end()) continue;
      if (s->second.value != a->second.value + b->second.value)
        bad_input("input {} gives `{}` = {} but `{}` + `{}` = {} + {} = {} (from {} and {})", s->second.input, r.sum,
                  s->second.value, r.a, r.b, a->second.value, b->second.value, a->second.value + b->second.value,
                  a->second.input, b->second.input);
    }
    return bound;
  }

  // The run-time value a declared dim must have, when the inputs determine it.
  std::optional<int64_t> expected_dim(const Dim& d, const Bindings& bound) const {
    if (d.is_fixed()) return d.value;
    if (!d.is_symbol()) return std::nullopt;
    if (auto it = bound.find(d.symbol); it != bound.end()) return it->second.value;
    for (const auto& r : exec->symbols().relations()) {
      if (r.sum != d.symbol) continue;
      auto a = bound.find(r.a), b = bound.find(r.b);
      if (a != bound.end() && b != bound.end()) return a->second.value + b->second.value;
    }
    // An undeclared sum is spelled "a + b".
    int64_t total = 0;
    size_t pos = 0;
    while (true) {
      size_t next = d.symbol.find(" + ", pos);
      std::string term = d.symbol.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
      auto it = bound.find(term);
      if (it == bound.end()) return std::nullopt;
      total += it->second.value;
      if (next == std::string::npos) break;
      pos = next + 3;
    }
    return total;
  }

  void check_declared(const ir::Node& node, ir::ValueId id, const Tensor& t, const Bindings& bound) const {
    const ir::Value& v = exec->value(id);
    bool ok = detail::compute_dtype(v.dtype) == t.dtype() && int64_t(v.shape.size()) == t.rank();
    for (size_t d = 0; ok && d < v.shape.size(); ++d)
      if (auto want = expected_dim(v.shape[d], bound)) ok = *want == t.shape()[d];
    if (!ok)
      fail(ErrorKind::Internal, "reference executor: node {} ({}) computed {}{} but the graph declares {}{}", node.name,
           node.op, dtype_name(t.dtype()), detail::shape_string(t.shape()), dtype_name(v.dtype), shape_str(v.shape));
  }

  // A weight (materialised and converted to its compute dtype) or a cached constant value; without
  // the cache, any constant value, computed now from its producer.
  std::shared_ptr<const Tensor> constant_value(ir::ValueId id) {
    if (const auto& cached = cache[size_t(id)]) return cached;
    const ir::WeightRef* w = exec->weight(id);
    if (!w && !options.cache_weights && producer[size_t(id)] >= 0) return computed_constant(id);
    HFX_CHECK(w, "value {} is read before it is computed", exec->value(id).name);
    auto t = std::make_shared<Tensor>(with_context("weight " + exec->value(id).name, [&] {
      Tensor m = w->materialize();
      return packed_bytes[size_t(id)] && m.dtype() == DType::U8 ? m : detail::to_compute(std::move(m));
    }));
    if (keep_cached[size_t(id)]) cache[size_t(id)] = t;
    if (!options.cache_weights) w->release_source_pages();  // read again next run: RSS stays near one layer
    return t;
  }

  std::vector<Tensor> run_node(size_t i, const detail::KernelInputs& args, bool release = true) {
    const ir::Node& node = exec->nodes()[i];
    std::vector<Tensor> outs = with_context(fmt::format("node {} ({})", node.name, node.op), [&] {
      const TensorBudget budget(options.max_tensor_bytes);  // what the kernel allocates, not the weights
      if (stored[i]) return std::move(detail::run_with_stored_weight(node, {args}, stored[i]->matrix, !options.cache_weights).front());
      return kernels[i](node, args);
    });
    // Read again next run: RSS stays near one layer's weights.
    if (release && releases_after(i)) stored[i]->weight->release_source_pages();
    HFX_CHECK(outs.size() == node.outputs.size(), "kernel {} gave {} outputs for {}", node.op, outs.size(),
              node.outputs.size());
    return outs;
  }

  // Node i for every run of a group (run_many): each run's outputs.
  std::vector<std::vector<Tensor>> run_group(size_t i, const std::vector<detail::KernelInputs>& args) {
    const ir::Node& node = exec->nodes()[i];
    auto outs = with_context(fmt::format("node {} ({})", node.name, node.op), [&] {
      const TensorBudget budget(options.max_tensor_bytes);
      if (stored[i]) return detail::run_with_stored_weight(node, args, stored[i]->matrix, !options.cache_weights);
      return detail::group_kernel(node)(node, args);
    });
    for (const auto& o : outs)
      HFX_CHECK(o.size() == node.outputs.size(), "kernel {} gave {} outputs for {}", node.op, o.size(), node.outputs.size());
    return outs;
  }

  // A weight-only value computed from its producer, its inputs computed the same way (a Transpose of
  // a Cast of a weight): nothing of the chain outlives the call.
  std::shared_ptr<const Tensor> computed_constant(ir::ValueId id) {
    const size_t i = size_t(producer[size_t(id)]);
    const ir::Node& node = exec->nodes()[i];
    if (node.op == "Transpose" && node.inputs.size() == 1 && exec->weight(node.inputs[0])) {
      // Read transposed straight from the file: one buffer, not the weight and its transpose (an
      // artifact's tied lm_head is Transpose(embedding table): 2 x 622 MB on a Qwen3-0.6B shape).
      const ir::WeightRef* w = exec->weight(node.inputs[0]);
      std::vector<int64_t> perm = node.has_attr("perm") ? node.attr_ints("perm") : std::vector<int64_t>{};
      if (perm.empty())
        for (int64_t d = int64_t(w->shape().size()) - 1; d >= 0; --d) perm.push_back(d);
      auto t = std::make_shared<Tensor>(with_context("weight " + exec->value(node.inputs[0]).name, [&] {
        return detail::to_compute(w->transposed(perm).materialize());
      }));
      w->release_source_pages();
      return t;
    }
    std::vector<std::shared_ptr<const Tensor>> held;
    detail::KernelInputs args;
    for (auto in : node.inputs) {
      if (in == ir::kNone) {
        args.push_back(nullptr);
        continue;
      }
      held.push_back(constant_value(in));
      args.push_back(held.back().get());
    }
    std::vector<Tensor> outs = run_node(i, args);
    for (size_t o = 0; o < outs.size(); ++o)
      if (node.outputs[o] == id) return std::make_shared<Tensor>(std::move(outs[o]));
    HFX_CHECK(false, "node {} does not compute {}", node.name, exec->value(id).name);
  }

  // One run's values: what it was given, what it computed so far.
  struct RunState {
    Bindings bound;
    std::vector<std::shared_ptr<const Tensor>> vals;
    std::vector<bool> borrowed;  // inputs already in their compute dtype: not copied (they outlive the run)
  };

  RunState start_run(const std::map<std::string, Tensor>& inputs) {
    RunState r{validate_inputs(inputs), std::vector<std::shared_ptr<const Tensor>>(exec->num_values()),
               std::vector<bool>(exec->num_values(), false)};
    for (auto id : source.inputs()) {
      const Tensor& t = inputs.at(source.value(id).name);
      const auto eid = size_t(map[size_t(id)]);
      if (detail::compute_dtype(t.dtype()) == t.dtype()) {
        r.vals[eid] = std::shared_ptr<const Tensor>(&t, [](const Tensor*) {});
        r.borrowed[eid] = true;
      } else {
        r.vals[eid] = std::make_shared<Tensor>(detail::to_compute(t));
      }
    }
    return r;
  }

  std::vector<std::map<std::string, Tensor>> run_many(const std::vector<const std::map<std::string, Tensor>*>& inputs) {
    std::vector<RunState> runs;
    for (const auto* in : inputs) runs.push_back(start_run(*in));
    const auto& nodes = exec->nodes();
    const bool streamed = !options.cache_weights;
    std::vector<detail::KernelInputs> group_args;  // each run's inputs of the node
    // A streamed run's constant inputs, computed for this node only and shared by the runs.
    std::vector<std::shared_ptr<const Tensor>> streamed_args;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const ir::Node& node = nodes[i];
      if (!needed[i] || ((folded || streamed) && constant_node[i])) continue;  // cached, or computed where read
      streamed_args.assign(node.inputs.size(), nullptr);
      group_args.assign(runs.size(), {});
      for (size_t k = 0; k < runs.size(); ++k) {
        RunState& r = runs[k];
        detail::KernelInputs& args = group_args[k];
        for (size_t j = 0; j < node.inputs.size(); ++j) {
          const ir::ValueId in = node.inputs[j];
          if (in == ir::kNone || input_read_in_place(i, j)) {
            args.push_back(nullptr);
            continue;
          }
          if (streamed && is_const[size_t(in)]) {
            if (!streamed_args[j]) streamed_args[j] = constant_value(in);
            args.push_back(streamed_args[j].get());
            continue;
          }
          auto& slot = r.vals[size_t(in)];
          if (!slot) slot = constant_value(in);
          args.push_back(slot.get());
        }
      }
      // A node that reads a weight in place, or whose kernel shares its weight's work between runs,
      // runs once for the group.
      std::vector<std::vector<Tensor>> group_outs;
      if (runs.size() > 1 && (stored[i] || detail::group_kernel(node))) group_outs = run_group(i, group_args);
      for (size_t k = 0; k < runs.size(); ++k) {
        RunState& r = runs[k];
        std::vector<Tensor> outs = group_outs.empty() ? run_node(i, group_args[k], /*release=*/false) : std::move(group_outs[k]);
        for (size_t o = 0; o < outs.size(); ++o) {
          if (options.check_declared_shapes) check_declared(node, node.outputs[o], outs[o], r.bound);
          auto& slot = r.vals[size_t(node.outputs[o])];
          slot = std::make_shared<Tensor>(std::move(outs[o]));
          if (constant_node[i] && keep_cached[size_t(node.outputs[o])]) cache[size_t(node.outputs[o])] = slot;
        }
        for (auto in : node.inputs)
          if (in != ir::kNone && last_use[size_t(in)] == int32_t(i)) r.vals[size_t(in)].reset();
        for (auto out : node.outputs)
          if (last_use[size_t(out)] == int32_t(i)) r.vals[size_t(out)].reset();
      }
      streamed_args.clear();
      // Read again next time: RSS stays near one layer's weights.
      if (releases_after(i)) stored[i]->weight->release_source_pages();
    }

    folded = options.cache_weights;  // constant values are cached only then
    std::vector<std::map<std::string, Tensor>> results_of_runs;
    for (auto& r : runs) results_of_runs.push_back(finish_run(r));
    return results_of_runs;
  }

  // Results are moved out when nothing else holds them (not cached, not borrowed, not returned
  // twice), else copied.
  std::map<std::string, Tensor> finish_run(RunState& r) {
    std::map<ir::ValueId, int> wanted;
    for (const auto& res : results) ++wanted[res.second];
    std::map<std::string, Tensor> result;
    for (const auto& [name, id] : results) {
      auto& slot = r.vals[size_t(id)];
      if (!slot) slot = constant_value(id);
      if (--wanted[id] == 0 && slot.use_count() == 1 && !r.borrowed[size_t(id)]) {
        result[name] = std::move(const_cast<Tensor&>(*slot));
        slot.reset();
      } else {
        result[name] = *slot;
      }
    }
    return result;
  }
};

int64_t contract_tensor_budget(const ir::Graph& g, int64_t batch, int64_t length) {
  // Saturating arithmetic: a hostile graph may declare dims near INT64_MAX.
  constexpr int64_t kCap = int64_t(1) << 62;
  auto mul = [](int64_t a, int64_t b) {
    int64_t r = 0;
    return a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > kCap ? kCap : r;
  };
  auto dim_value = [&](const Dim& d) -> int64_t {
    if (d.is_fixed()) return d.value;
    int64_t v = d.symbol.find("batch") != std::string::npos ? batch : length;
    if (d.is_symbol())
      if (auto max = g.symbols().bounds(d.symbol).max) v = std::min(v, *max);
    return std::max<int64_t>(v, 1);
  };
  int64_t largest_port = 0;
  auto port = [&](ir::ValueId id) {
    int64_t n = 8;
    for (const auto& d : g.value(id).shape) n = mul(n, dim_value(d));
    largest_port = std::max(largest_port, n);
  };
  for (auto id : g.inputs()) port(id);
  for (auto id : g.outputs()) port(id);
  int64_t largest_weight = 0;
  for (auto id : g.weights()) {
    int64_t n = 4;
    for (const auto& d : g.value(id).shape) n = mul(n, d.is_fixed() ? d.value : 1);
    largest_weight = std::max(largest_weight, n);
  }
  const int64_t scores = mul(mul(mul(std::max<int64_t>(batch, 1), 256 * 4), length), length);
  return std::max({int64_t(512) << 20, mul(16, largest_port), scores, mul(4, largest_weight)});
}

Executor::Executor(const ir::Graph& graph, ExecOptions options)
    : impl_(std::make_unique<Impl>(graph, std::move(options))) {}

Executor::~Executor() = default;

std::map<std::string, Tensor> Executor::run(const std::map<std::string, Tensor>& inputs) {
  return std::move(impl_->run_many({&inputs}).front());
}

std::vector<std::map<std::string, Tensor>> Executor::run_many(const std::vector<const std::map<std::string, Tensor>*>& inputs) {
  return impl_->run_many(inputs);
}

}  // namespace hfx::runtime
