// The OpenVINO backend's lowering table: how each IR op becomes ov::op::vN nodes. IR primitives have
// ONNX opset-21 semantics (see ir/ops.h); most map to one OpenVINO op, a few to two or three
// (Reciprocal = Divide(1, x), Shape with start/end = ShapeOf + Slice). One composite, `Attention`,
// has a direct lowering to ScaledDotProductAttention (opset 13) for the passes that keep it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <openvino/core/node_output.hpp>
#include <openvino/core/type/element_type.hpp>

#include "core/dtype.h"
#include "ir/graph.h"

namespace hfx::openvino_backend {

// What a lowering sees: the IR node, its graph (for dtypes, shapes and constant inputs), and the
// OpenVINO outputs of its inputs (an empty Output for an absent optional input).
struct LowerContext {
  const ir::Graph& graph;
  const ir::Node& node;
  std::vector<ov::Output<ov::Node>> inputs;

  bool has_input(size_t i) const { return i < inputs.size() && inputs[i].get_node() != nullptr; }
  const ov::Output<ov::Node>& input(size_t i) const;  // Internal error when absent
};

// Returns one OpenVINO output per IR output of the node, in order.
using OvLowering = std::function<ov::OutputVector(const LowerContext&)>;

// Keyed by IR op name. The writer fails with Unsupported naming op and node for a missing entry.
const std::map<std::string, OvLowering>& ov_lowering_table();
const OvLowering* find_ov_lowering(const std::string& ir_op);

// The OpenVINO element type of an hfx dtype (Internal error for one OpenVINO lacks).
ov::element::Type ov_element_type(DType t);

}  // namespace hfx::openvino_backend
