// The ONNX writer's lowering of RecurrenceScan (ir/ops.h, `--onnx-recurrence scan`) to an ONNX Scan over
// the time axis (axis 1 of every per-step input and of the output), the carried state in the Scan's one
// state variable, and a body that is one recurrent step (ir/recurrences.h: gated_delta_rule_step,
// ssd_step) written by the writer's own machinery (write_subgraph). The IR has no subgraphs: the body
// is a function of the node's attributes, so the reader takes a Scan back only when its body is
// byte for byte the one hfx writes for the dims its state input declares, and refuses any other.
#pragma once

#include <string>

#include "ir/graph.h"

namespace onnx {
class NodeProto;
}

namespace hfx::onnx_backend {

// One step of the rule the node's attributes name, as a graph: inputs (state, per-step inputs
// without the time axis), outputs (the state after the step, the step's output).
ir::Graph recurrence_step_graph(const ir::Node& node);

// Fills the Scan's attributes: body, num_scan_inputs, scan_input_axes, scan_output_axes.
void lower_recurrence_scan(const ir::Node& node, onnx::NodeProto& proto);
// The RecurrenceScan attributes of a Scan hfx wrote (read from its body's state input), after
// re-emitting its attributes from them and finding them identical; Unsupported for any other Scan.
ir::Attrs raise_recurrence_scan(const onnx::NodeProto& proto);

}  // namespace hfx::onnx_backend
