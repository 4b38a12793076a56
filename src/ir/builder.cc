#include "ir/builder.h"

#include <fmt/format.h>

#include "core/error.h"
#include "ir/ops.h"

namespace hfx::ir {

Builder::Scope Builder::scope(const std::string& name) {
  prefix_.push_back(name);
  return Scope(this);
}

std::string Builder::node_name(const std::string& op) {
  std::string base;
  for (const auto& p : prefix_) base += "/" + p;
  base += "/" + op;
  // Unique within this builder, and against values already in the graph (a rewrite copies them).
  int& count = used_names_[base];
  std::string name;
  do {
    name = count == 0 ? base : fmt::format("{}_{}", base, count);
    ++count;
  } while (taken(name + "/output_0"));
  return name;
}

std::vector<ValueId> Builder::add(const std::string& op, std::vector<ValueId> inputs, Attrs attrs,
                                  std::vector<std::string> names) {
  const OpSchema& schema = op_schema(op);
  Node node{op, node_name(op), std::move(inputs), {}, std::move(attrs)};
  std::vector<Value> outs = with_context("node " + node.name, [&] { return infer_outputs(graph_, node); });
  HFX_CHECK(outs.size() == schema.num_outputs, "{} inferred {} outputs", op, outs.size());
  for (size_t i = 0; i < outs.size(); ++i)
    outs[i].name = i < names.size() && !names[i].empty() ? names[i] : fmt::format("{}/output_{}", node.name, i);
  return graph_.add_node(std::move(node), outs).outputs;
}

ValueId Builder::add1(const std::string& op, std::vector<ValueId> inputs, Attrs attrs, std::string name) {
  return add(op, std::move(inputs), std::move(attrs), {std::move(name)})[0];
}

ValueId Builder::constant(const Tensor& value, const std::string& hint) {
  std::string key;
  if (value.nbytes() <= 256) {
    key = fmt::format("{}:{}:", dtype_name(value.dtype()), fmt::join(value.shape(), "x"));
    key.append(reinterpret_cast<const char*>(value.data()), value.nbytes());
    if (auto it = constants_.find(key); it != constants_.end()) return it->second;
  }
  int& count = used_names_["/const/" + hint];
  std::string name;
  do {
    name = count == 0 ? "/const/" + hint : fmt::format("/const/{}_{}", hint, count);
    ++count;
  } while (taken(name));
  ValueId id = graph_.add_weight(name, WeightRef::constant(value));
  if (!key.empty()) constants_[key] = id;
  return id;
}

ValueId Builder::i64s(const std::vector<int64_t>& values) { return constant(Tensor::vector_i64(values), "i64"); }
ValueId Builder::i64(int64_t value) { return constant(Tensor::scalar_i64(value), "i64"); }
ValueId Builder::f32(float value) { return constant(Tensor::scalar_f32(value), "f32"); }

ValueId Builder::slice(ValueId x, int64_t start, int64_t end, int64_t axis) {
  return add1("Slice", {x, i64s({start}), i64s({end}), i64s({axis})});
}

ValueId Builder::cast(ValueId x, DType to) {
  if (graph_.value(x).dtype == to) return x;
  return add1("Cast", {x}, {{"to", std::string(dtype_name(to))}});
}

ValueId Builder::shape_of(ValueId x, int64_t start, int64_t end) {
  return add1("Shape", {x}, {{"start", start}, {"end", end}});
}

}  // namespace hfx::ir
