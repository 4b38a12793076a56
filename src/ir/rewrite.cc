#include "ir/rewrite.h"

#include "core/error.h"

namespace hfx::ir {

Rewriter::Rewriter(const Graph& src) : Rewriter(src, {}) {}

Rewriter::Rewriter(const Graph& src, const std::set<std::string>& computed)
    : src_(src), dst_(src.name()), builder_(dst_), map_(src.num_values(), kNone) {
  dst_.symbols() = src.symbols();
  builder_.avoid_names_of(&src_);
  for (auto id : src.inputs()) {
    const Value& v = src.value(id);
    if (!computed.count(v.name)) map_[size_t(id)] = dst_.add_input(v.name, v.dtype, v.shape);
  }
}

ValueId Rewriter::map(ValueId id) {
  if (id == kNone) return kNone;
  ValueId& m = map_[size_t(id)];
  if (m == kNone) {
    const WeightRef* w = src_.weight(id);
    HFX_CHECK(w, "value {} used before it is defined", src_.value(id).name);
    m = dst_.add_weight(src_.value(id).name, *w);
  }
  return m;
}

Node Rewriter::mapped(const Node& node) {
  Node n = node;
  for (auto& in : n.inputs) in = map(in);
  return n;
}

void Rewriter::copy(const Node& src_node, const Node& mapped_node) {
  std::vector<Value> outs;
  for (auto o : src_node.outputs) outs.push_back(src_.value(o));
  const Node& added = dst_.add_node(mapped_node, outs);
  for (size_t i = 0; i < src_node.outputs.size(); ++i) map_[size_t(src_node.outputs[i])] = added.outputs[i];
}

void Rewriter::replace(const Node& src_node, const std::vector<ValueId>& values) {
  HFX_CHECK(values.size() == src_node.outputs.size(), "{}: {} replacement values for {} outputs", src_node.name,
            values.size(), src_node.outputs.size());
  for (size_t i = 0; i < values.size(); ++i) {
    ValueId v = values[i];
    const Value& old = src_.value(src_node.outputs[i]);
    // Keep the source's value names (graph outputs such as "logits" must not change). A replacement
    // that is an existing input or weight gets an Identity so the name can live on.
    if (dst_.value(v).producer < 0) v = builder_.add1("Identity", {v});
    dst_.rename(v, old.name);
    map_[size_t(src_node.outputs[i])] = v;
  }
}

Graph Rewriter::finish() {
  for (auto id : src_.outputs()) dst_.add_output(map(id));
  return prune(dst_);
}

std::vector<int> use_counts(const Graph& graph) {
  std::vector<int> uses(graph.num_values(), 0);
  for (const auto& n : graph.nodes())
    for (auto in : n.inputs)
      if (in != kNone) ++uses[size_t(in)];
  for (auto id : graph.outputs()) ++uses[size_t(id)];
  return uses;
}

Graph prune(const Graph& graph) {
  std::vector<bool> live(graph.num_values(), false);
  for (auto id : graph.outputs()) live[size_t(id)] = true;
  std::vector<bool> keep(graph.nodes().size(), false);
  for (size_t i = graph.nodes().size(); i-- > 0;) {
    const Node& n = graph.nodes()[i];
    for (auto o : n.outputs) keep[i] = keep[i] || live[size_t(o)];
    if (keep[i])
      for (auto in : n.inputs)
        if (in != kNone) live[size_t(in)] = true;
  }
  Rewriter r(graph);
  for (size_t i = 0; i < graph.nodes().size(); ++i)
    if (keep[i]) r.copy(graph.nodes()[i], r.mapped(graph.nodes()[i]));
  Graph out = std::move(r.target());
  for (auto id : graph.outputs()) out.add_output(r.map(id));
  return out;
}

const Node* producer(const Graph& g, ValueId id) {
  if (id == kNone) return nullptr;
  const int32_t p = g.value(id).producer;
  return p < 0 ? nullptr : &g.nodes()[size_t(p)];
}

std::string scope_of(const std::string& node_name, int levels) {
  std::string s = node_name.substr(!node_name.empty() && node_name.front() == '/' ? 1 : 0);
  for (int i = 0; i < levels; ++i) s = s.substr(0, s.rfind('/') == std::string::npos ? 0 : s.rfind('/'));
  return s;
}

}  // namespace hfx::ir
