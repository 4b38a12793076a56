#include "ir/graph.h"

#include <fmt/format.h>

#include <set>

#include "core/error.h"

namespace hfx::ir {

namespace {
template <typename T>
const T& get_attr(const Node& n, const std::string& key) {
  auto it = n.attrs.find(key);
  HFX_CHECK(it != n.attrs.end(), "node {} ({}) has no attribute `{}`", n.name, n.op, key);
  const T* v = std::get_if<T>(&it->second);
  HFX_CHECK(v, "node {} ({}) attribute `{}` has another type", n.name, n.op, key);
  return *v;
}
}  // namespace

int64_t Node::attr_int(const std::string& key) const { return get_attr<int64_t>(*this, key); }
int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  return has_attr(key) ? attr_int(key) : fallback;
}
double Node::attr_float(const std::string& key) const { return get_attr<double>(*this, key); }
double Node::attr_float(const std::string& key, double fallback) const {
  return has_attr(key) ? attr_float(key) : fallback;
}
std::string Node::attr_str(const std::string& key, const std::string& fallback) const {
  return has_attr(key) ? get_attr<std::string>(*this, key) : fallback;
}
std::vector<int64_t> Node::attr_ints(const std::string& key) const {
  return get_attr<std::vector<int64_t>>(*this, key);
}

ValueId Graph::new_value(Value v) {
  HFX_CHECK(!by_name_.count(v.name), "duplicate value name {}", v.name);
  auto id = ValueId(values_.size());
  by_name_[v.name] = id;
  values_.push_back(std::move(v));
  return id;
}

ValueId Graph::add_input(const std::string& name, DType dtype, Shape shape) {
  for (const auto& d : shape)
    if (d.is_symbol()) symbols_.declare(d.symbol);
  auto id = new_value(Value{name, dtype, std::move(shape), -1});
  inputs_.push_back(id);
  return id;
}

ValueId Graph::add_weight(const std::string& name, WeightRef weight) {
  auto id = new_value(Value{name, weight.dtype(), fixed_shape(weight.shape()), -1});
  weight_ids_.push_back(id);
  weights_.emplace(id, std::move(weight));
  return id;
}

const Node& Graph::add_node(Node node, const std::vector<Value>& outputs) {
  for (auto in : node.inputs) HFX_CHECK(in == kNone || size_t(in) < values_.size(), "node {} input {}", node.name, in);
  node.outputs.clear();
  for (const auto& o : outputs) {
    Value v = o;
    v.producer = int32_t(nodes_.size());
    node.outputs.push_back(new_value(std::move(v)));
  }
  nodes_.push_back(std::move(node));
  return nodes_.back();
}

void Graph::rename(ValueId id, const std::string& name) {
  Value& v = values_.at(size_t(id));
  if (v.name == name) return;
  HFX_CHECK(!by_name_.count(name), "rename of {} to existing name {}", v.name, name);
  by_name_.erase(v.name);
  by_name_[name] = id;
  v.name = name;
}

const WeightRef* Graph::weight(ValueId id) const {
  auto it = weights_.find(id);
  return it == weights_.end() ? nullptr : &it->second;
}

std::optional<Tensor> Graph::constant(ValueId id) const {
  const WeightRef* w = id == kNone ? nullptr : weight(id);
  if (!w || !w->is_constant()) return std::nullopt;
  return w->materialize();  // constants own their bytes: this is a small copy
}

std::optional<ValueId> Graph::find(const std::string& value_name) const {
  auto it = by_name_.find(value_name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

void Graph::validate() const {
  std::vector<bool> defined(values_.size(), false);
  for (auto id : inputs_) defined[size_t(id)] = true;
  for (auto id : weight_ids_) defined[size_t(id)] = true;
  for (const auto& n : nodes_) {
    for (auto in : n.inputs)
      HFX_CHECK(in == kNone || defined[size_t(in)], "node {} reads {} before it is defined", n.name,
                values_[size_t(in)].name);
    for (auto out : n.outputs) {
      HFX_CHECK(!defined[size_t(out)], "value {} defined twice", values_[size_t(out)].name);
      defined[size_t(out)] = true;
    }
  }
  for (auto id : outputs_) HFX_CHECK(defined[size_t(id)], "graph output {} is never defined", values_[size_t(id)].name);
}

std::string Graph::to_text() const {
  std::string out;
  auto sig = [&](ValueId id) {
    if (id == kNone) return std::string("_");
    const auto& v = values_[size_t(id)];
    return fmt::format("%{}: {}{}", v.name, dtype_name(v.dtype), shape_str(v.shape));
  };
  for (auto id : inputs_) out += "input " + sig(id) + "\n";
  for (auto id : weight_ids_) out += "weight " + sig(id) + " = " + weights_.at(id).describe() + "\n";
  for (const auto& n : nodes_) {
    std::vector<std::string> ins, outs;
    for (auto i : n.inputs) ins.push_back(i == kNone ? "_" : "%" + values_[size_t(i)].name);
    for (auto o : n.outputs) outs.push_back(sig(o));
    out += fmt::format("{} = {}({})  # {}\n", fmt::join(outs, ", "), n.op, fmt::join(ins, ", "), n.name);
  }
  for (auto id : outputs_) out += "output %" + values_[size_t(id)].name + "\n";
  return out;
}

}  // namespace hfx::ir
