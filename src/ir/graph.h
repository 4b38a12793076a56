// The IR: a graph of SSA values. A value has a dtype and a shape of dims (numbers or named symbols);
// a node applies an op (see ops.h) to values and defines new ones; initializers are lazy weights.
// Nodes are kept in topological order: a builder only appends nodes whose inputs already exist.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "ir/weight.h"

namespace hfx::ir {

using ValueId = int32_t;
constexpr ValueId kNone = -1;  // an absent optional input

using Attr = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;
using Attrs = std::map<std::string, Attr>;

struct Value {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  int32_t producer = -1;  // index of the node that defines it; -1 for inputs and weights
};

struct Node {
  std::string op;    // op type, see ops.h
  std::string name;  // hierarchical, deterministic: "/model/layers.3/attn/q_proj"
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  Attrs attrs;

  int64_t attr_int(const std::string& key) const;
  int64_t attr_int(const std::string& key, int64_t fallback) const;
  double attr_float(const std::string& key) const;
  double attr_float(const std::string& key, double fallback) const;
  std::string attr_str(const std::string& key, const std::string& fallback = "") const;
  std::vector<int64_t> attr_ints(const std::string& key) const;
  bool has_attr(const std::string& key) const { return attrs.count(key) > 0; }
  // The i-th input, or kNone when absent.
  ValueId input(size_t i) const { return i < inputs.size() ? inputs[i] : kNone; }
};

class Graph {
 public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  SymbolTable& symbols() { return symbols_; }
  const SymbolTable& symbols() const { return symbols_; }

  ValueId add_input(const std::string& name, DType dtype, Shape shape);
  ValueId add_weight(const std::string& name, WeightRef weight);
  // Appends a node; outputs are given as (name, dtype, shape) and become new values.
  const Node& add_node(Node node_without_outputs, const std::vector<Value>& outputs);
  void add_output(ValueId id) { outputs_.push_back(id); }
  // Renames a value (names must stay unique).
  void rename(ValueId id, const std::string& name);

  const Value& value(ValueId id) const { return values_.at(size_t(id)); }
  Value& value(ValueId id) { return values_.at(size_t(id)); }
  size_t num_values() const { return values_.size(); }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  // Weights in the order they were added.
  const std::vector<ValueId>& weights() const { return weight_ids_; }
  const WeightRef* weight(ValueId id) const;
  // The value of a constant initializer (shape tensors, small tables), if `id` is one.
  std::optional<Tensor> constant(ValueId id) const;
  std::optional<ValueId> find(const std::string& value_name) const;

  // Checks SSA form, topological order, unique names, and that every output is defined.
  void validate() const;
  // Same-graph text dump, one node a line, for tests and debugging.
  std::string to_text() const;

 private:
  ValueId new_value(Value v);
  std::string name_;
  SymbolTable symbols_;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_, outputs_, weight_ids_;
  std::map<ValueId, WeightRef> weights_;
  std::map<std::string, ValueId> by_name_;
};

}  // namespace hfx::ir
