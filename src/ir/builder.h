// Builds IR with hierarchical, deterministic names. Every add() runs the op's shape and dtype
// inference, so a graph is typed as it is built.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace hfx::ir {

class Builder {
 public:
  explicit Builder(Graph& graph) : graph_(graph) {}
  // Also avoids the value names of `other` (a rewrite copies values from its source lazily).
  void avoid_names_of(const Graph* other) { avoid_ = other; }
  Graph& graph() { return graph_; }

  // Names nodes "/a/b/Op" while in scope; scopes nest. Keep the returned object alive.
  class Scope {
   public:
    explicit Scope(Builder* b) : b_(b) {}
    ~Scope() { if (b_) b_->prefix_.pop_back(); }
    Scope(Scope&& o) noexcept : b_(o.b_) { o.b_ = nullptr; }
    Scope(const Scope&) = delete;
   private:
    Builder* b_;
  };
  [[nodiscard]] Scope scope(const std::string& name);
  // The scope whose products keep f32 in reduced-precision exports (apply-precision stores their weights
  // in the dtype, never quantized, and computes them in f32): for blocks Transformers computes in f32
  // whatever the model's dtype, such as a sigmoid MoE router.
  static constexpr const char* kKeepF32Scope = "keep_f32";

  // Adds `op` applied to `inputs`; returns its outputs. `names` optionally names the outputs
  // (graph outputs such as "logits"); otherwise they are "<node name>/output_<i>".
  std::vector<ValueId> add(const std::string& op, std::vector<ValueId> inputs, Attrs attrs = {},
                           std::vector<std::string> names = {});
  ValueId add1(const std::string& op, std::vector<ValueId> inputs, Attrs attrs = {}, std::string name = "");

  // Constants become initializers; identical small constants are shared.
  ValueId constant(const Tensor& value, const std::string& hint = "const");
  ValueId i64s(const std::vector<int64_t>& values);  // 1-D int64
  ValueId i64(int64_t value);                         // scalar int64
  ValueId f32(float value);                           // scalar f32
  ValueId weight(const std::string& name, WeightRef ref) { return graph_.add_weight(name, std::move(ref)); }

  // Shorthands for the primitives model code and decompositions use most.
  ValueId matmul(ValueId a, ValueId b) { return add1("MatMul", {a, b}); }
  ValueId plus(ValueId a, ValueId b) { return add1("Add", {a, b}); }
  ValueId minus(ValueId a, ValueId b) { return add1("Sub", {a, b}); }
  ValueId times(ValueId a, ValueId b) { return add1("Mul", {a, b}); }
  ValueId divide(ValueId a, ValueId b) { return add1("Div", {a, b}); }
  ValueId reshape(ValueId x, const std::vector<int64_t>& shape) { return add1("Reshape", {x, i64s(shape)}); }
  ValueId transpose(ValueId x, const std::vector<int64_t>& perm) { return add1("Transpose", {x}, {{"perm", perm}}); }
  ValueId unsqueeze(ValueId x, const std::vector<int64_t>& axes) { return add1("Unsqueeze", {x, i64s(axes)}); }
  ValueId squeeze(ValueId x, const std::vector<int64_t>& axes) { return add1("Squeeze", {x, i64s(axes)}); }
  ValueId concat(std::vector<ValueId> xs, int64_t axis) { return add1("Concat", std::move(xs), {{"axis", axis}}); }
  ValueId slice(ValueId x, int64_t start, int64_t end, int64_t axis);
  ValueId cast(ValueId x, DType to);
  ValueId shape_of(ValueId x, int64_t start, int64_t end);  // 1-D int64 [end - start]

 private:
  std::string node_name(const std::string& op);
  bool taken(const std::string& value_name) const {
    return graph_.find(value_name) || (avoid_ && avoid_->find(value_name));
  }
  Graph& graph_;
  const Graph* avoid_ = nullptr;
  std::vector<std::string> prefix_;
  std::map<std::string, int> used_names_;
  std::map<std::string, ValueId> constants_;
};

}  // namespace hfx::ir
