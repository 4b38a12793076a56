#include "backends/executorch/et_xnnpack_partition.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace hfx::executorch_backend {

namespace {

using Kind = EtValue::Kind;

constexpr uint32_t kKeepDims = 0x40;  // XNN_FLAG_KEEP_DIMS

bool is_shape_call(const EtMethod& m, const EtCall& c) {
  if (c.delegate || c.op < 0) return false;
  const auto& name = m.operators[size_t(c.op)].first;
  return name == "aten::sym_size" || name.starts_with("executorch_prim::");
}

// Every EValue a call reads or writes, list items included (a view's sizes hold the Ints sym_size computes).
void each_arg(const EtMethod& m, const EtCall& c, const std::function<void(int)>& f) {
  for (int a : c.args) {
    if (a < 0) continue;
    f(a);
    const auto& e = m.values[size_t(a)];
    if (e.kind == Kind::TensorList || e.kind == Kind::OptionalTensorList || e.kind == Kind::IntList)
      for (auto i : e.items)
        if (i >= 0) f(int(i));
  }
}

// reciprocal(sqrt(x)) whose sqrt nobody else reads: one ReciprocalSquareRoot of x (XNNPACK has no
// reciprocal node), the sqrt call dropped. A reciprocal of anything else stays a portable kernel.
void fuse_rsqrt(const EtMethod& m, std::map<size_t, XnnOp>& ops, std::set<size_t>& dead) {
  std::map<int, size_t> producer;
  for (const auto& [c, op] : ops) producer[op.output] = c;
  std::map<int, int> reads;
  for (size_t c = 0; c < m.calls.size(); ++c) {
    std::set<int> seen;
    auto it = ops.find(c);
    if (it != ops.end()) seen.insert(it->second.inputs.begin(), it->second.inputs.end());
    else each_arg(m, m.calls[c], [&](int v) { seen.insert(v); });
    for (int v : seen) reads[v]++;
  }
  for (int v : m.outputs) reads[v]++;
  std::vector<size_t> portable;
  for (auto& [c, op] : ops) {
    if (op.form != XnnOp::Form::Reciprocal) continue;
    auto p = producer.find(op.inputs.at(0));
    const XnnOp* sqrt = p == producer.end() ? nullptr : &ops.at(p->second);
    if (!sqrt || sqrt->form != XnnOp::Form::Node || sqrt->kind != XnnKind::SquareRoot || reads[op.inputs[0]] != 1) {
      portable.push_back(c);
      continue;
    }
    dead.insert(p->second);
    op = {XnnOp::Form::Node, XnnKind::ReciprocalSquareRoot, {sqrt->inputs.at(0)}, op.output, {}, 0, {}};
  }
  for (size_t c : portable) ops.erase(c);
  for (size_t c : dead) ops.erase(c);
}

class GraphBuilder {
 public:
  GraphBuilder(const EtMethod& m, const std::function<std::string(int)>& named) : m_(m), named_(named) {}

  void external(int v, bool output) {
    ids_[v] = add(v, int(g_.values.size()), output);
  }

  void lower(const XnnOp& op) {
    if (op.form == XnnOp::Form::Mean) return mean(op);
    XnnNode n{op.kind, {}, 0, op.params, op.flags};
    for (size_t i = 0; i < op.inputs.size(); ++i) n.inputs.push_back(id(op.inputs[i], i == 1 ? &op.int8_scales : nullptr));
    n.output = id(op.output, nullptr);
    g_.nodes.push_back(std::move(n));
  }

  XnnGraph take() { return std::move(g_); }

 private:
  uint32_t add(int v, int external, bool output) {
    const auto& t = m_.values.at(size_t(v)).tensor;
    XnnValue x;
    x.f16 = t.scalar_type == 5;
    x.dims = t.sizes;
    x.external = external;
    x.output = output;
    g_.values.push_back(std::move(x));
    return uint32_t(g_.values.size() - 1);
  }

  uint32_t internal(std::vector<int64_t> dims, bool f16) {
    XnnValue x;
    x.f16 = f16;
    x.dims = std::move(dims);
    g_.values.push_back(std::move(x));
    return uint32_t(g_.values.size() - 1);
  }

  // An EValue's value id: an external, a value a node of the graph computed, else a constant (named data).
  uint32_t id(int v, const std::vector<float>* int8_scales) {
    auto it = ids_.find(v);
    if (it != ids_.end()) return it->second;
    const auto& t = m_.values.at(size_t(v)).tensor;
    const uint32_t x = add(v, -1, false);
    if (t.constant) {
      g_.values[x].named_key = named_(v);
      if (t.scalar_type == 1) g_.values[x].int8_scales = *int8_scales;
    }
    ids_[v] = x;
    return x;
  }

  // mean over the last dim: [rows, D] viewed as NHWC [rows, D, 1, 1], XNNPACK's global average
  // pooling over H and W (keeping them), the [rows, 1, 1, 1] result viewed as the output.
  void mean(const XnnOp& op) {
    const uint32_t in = id(op.inputs.at(0), nullptr);
    const std::vector<int64_t> dims = g_.values[in].dims;  // a copy: internal() grows g_.values
    const bool f16 = g_.values[in].f16;
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < dims.size(); ++i) rows *= dims[i];
    const uint32_t nhwc = internal({rows, dims.back(), 1, 1}, f16), pooled = internal({rows, 1, 1, 1}, f16);
    g_.nodes.push_back({XnnKind::StaticReshape, {in}, nhwc, {op.params.at(0), dims.back(), 1, 1}, 0});
    g_.nodes.push_back({XnnKind::GlobalAvgPooling2d, {nhwc}, pooled, {}, kKeepDims});
    const uint32_t out = id(op.output, nullptr);
    g_.nodes.push_back({XnnKind::StaticReshape, {pooled}, out, {op.params.begin() + 1, op.params.end()}, 0});
  }

  const EtMethod& m_;
  const std::function<std::string(int)>& named_;
  XnnGraph g_;
  std::map<int, uint32_t> ids_;
};

}  // namespace

XnnPartitioned partition_for_xnnpack(EtMethod& m, const std::map<size_t, XnnOp>& tagged, const std::function<std::string(int)>& named,
                                     size_t first_blob) {
  std::map<size_t, XnnOp> ops = tagged;
  std::set<size_t> dead;
  fuse_rsqrt(m, ops, dead);

  // 1. Runs of XNNPACK calls (shape calls inside a run move after it).
  struct Item {
    bool part;
    size_t index;  // a call, or a partition
  };
  std::vector<std::vector<size_t>> parts;
  std::vector<Item> items;
  const size_t n = m.calls.size();
  for (size_t i = 0; i < n;) {
    if (dead.count(i)) {
      ++i;
      continue;
    }
    if (!ops.count(i)) {
      items.push_back({false, i++});
      continue;
    }
    std::vector<size_t> run, deferred;
    for (; i < n && (ops.count(i) || dead.count(i) || is_shape_call(m, m.calls[i])); ++i)
      if (ops.count(i)) run.push_back(i);
      else if (!dead.count(i)) deferred.push_back(i);
    items.push_back({true, parts.size()});
    parts.push_back(std::move(run));
    for (size_t d : deferred) items.push_back({false, d});
  }

  // 2. Each partition's external inputs: what its nodes read that none of them computes (constants
  // are the graph's static values).
  std::vector<std::vector<int>> inputs(parts.size()), outputs(parts.size());
  for (size_t p = 0; p < parts.size(); ++p) {
    std::set<int> made, seen;
    for (size_t c : parts[p]) made.insert(ops.at(c).output);
    for (size_t c : parts[p])
      for (int v : ops.at(c).inputs)
        if (!made.count(v) && !m.values[size_t(v)].tensor.constant && seen.insert(v).second) inputs[p].push_back(v);
  }

  // 3. Shape calls nobody reads any more go (last to first: a later one may read an earlier one's Int).
  std::set<int> read(m.outputs.begin(), m.outputs.end());
  for (const auto& in : inputs) read.insert(in.begin(), in.end());
  std::vector<bool> alive(items.size(), true);
  for (size_t k = items.size(); k-- > 0;) {
    if (items[k].part) continue;
    const EtCall& c = m.calls[items[k].index];
    if (is_shape_call(m, c) && !read.count(c.args.back())) {
      alive[k] = false;
      continue;
    }
    each_arg(m, c, [&](int v) { read.insert(v); });
  }

  // 4. External outputs: what a partition computes that a call outside it, or the method, reads.
  for (size_t p = 0; p < parts.size(); ++p)
    for (size_t c : parts[p])
      if (read.count(ops.at(c).output)) outputs[p].push_back(ops.at(c).output);

  // 5. The payloads and the new instruction list.
  XnnPartitioned result;
  std::vector<EtCall> calls;
  m.delegates.clear();
  for (size_t k = 0; k < items.size(); ++k) {
    if (!alive[k]) continue;
    if (!items[k].part) {
      calls.push_back(m.calls[items[k].index]);
      continue;
    }
    const size_t p = items[k].index;
    if (outputs[p].empty()) continue;  // nothing reads what it computes
    GraphBuilder b(m, named);
    for (int v : inputs[p]) b.external(v, false);
    for (int v : outputs[p]) b.external(v, true);
    for (size_t c : parts[p]) b.lower(ops.at(c));
    const XnnGraph g = b.take();
    for (const auto& node : g.nodes) result.nodes[xnn_kind_name(node.kind)]++;
    result.blobs.push_back(xnnpack_payload(g));
    m.delegates.push_back(first_blob + result.blobs.size() - 1);
    EtCall d{int(m.delegates.size() - 1), inputs[p], true};
    d.args.insert(d.args.end(), outputs[p].begin(), outputs[p].end());
    calls.push_back(std::move(d));
  }
  m.calls = std::move(calls);

  // 6. The operator table keeps the kernels still called; EValues no call reads any more (the values
  // inside the graphs, their argument lists) become Null, so nothing plans or parses them.
  std::vector<std::pair<std::string, std::string>> operators;
  std::map<int, int> renumbered;
  std::set<int> used(m.inputs.begin(), m.inputs.end());
  used.insert(m.outputs.begin(), m.outputs.end());
  for (auto& c : m.calls) {
    each_arg(m, c, [&](int v) { used.insert(v); });
    if (c.delegate) continue;
    auto [it, fresh] = renumbered.try_emplace(c.op, int(operators.size()));
    if (fresh) operators.push_back(m.operators[size_t(c.op)]);
    c.op = it->second;
  }
  m.operators = std::move(operators);
  for (size_t v = 0; v < m.values.size(); ++v) {
    auto& e = m.values[v];
    const bool tensor_like = e.kind == Kind::Tensor || e.kind == Kind::TensorList || e.kind == Kind::OptionalTensorList;
    if (tensor_like && !used.count(int(v)) && !(e.kind == Kind::Tensor && (e.tensor.constant || !e.tensor.fqn.empty()))) e = EtValue{};
  }
  return result;
}

}  // namespace hfx::executorch_backend
