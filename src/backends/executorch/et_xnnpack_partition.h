// XNNPACK partitions of a lowered ExecuTorch method: each run of consecutive kernel calls XNNPACK has
// a node for (tagged by the lowering with the XNNPACK op that computes them) becomes ONE DelegateCall
// of one XNNGraph with several nodes: its external inputs the tensors the run reads from before it,
// its external outputs the tensors later calls (or the method's outputs) read, the values between
// its nodes XNNPACK's own. A call XNNPACK does not cover (the cache's index_put_, embedding, gather,
// comparisons, expand) ends a run; shape calls (aten::sym_size, executorch_prim::*) do not: they read
// only sizes, so they move after the delegate, or go when nothing reads their Int any more.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backends/executorch/et_program.h"
#include "backends/executorch/et_xnnpack.h"

namespace hfx::executorch_backend {

// The XNNPACK op of one kernel call, on the method's EValues.
struct XnnOp {
  enum class Form { Node, Mean, Reciprocal } form = Form::Node;
  XnnKind kind = XnnKind::Copy;    // Form::Node
  std::vector<int> inputs;         // tensor EValues (constants become static values of the graph)
  int output = -1;
  std::vector<int64_t> params;     // XnnNode::params; Form::Mean: {rows or 0, the output's new shape...}
  uint32_t flags = 0;
  std::vector<float> int8_scales;  // FullyConnected with an int8 weight (inputs[1]): one scale per row
};

struct XnnPartitioned {
  std::vector<std::string> blobs;                 // one payload per delegate call, in call order
  std::map<std::string, int> nodes;               // XNNPACK node name -> count over the payloads
};

// Rewrites `m.calls` (and m.delegates, the operator table) in place. `named` gives the named-data key
// of a constant EValue an XNNPACK graph reads (registering it); the blobs are
// the program's delegate_blobs from index `first_blob` on.
XnnPartitioned partition_for_xnnpack(EtMethod& m, const std::map<size_t, XnnOp>& ops, const std::function<std::string(int)>& named,
                                     size_t first_blob);

}  // namespace hfx::executorch_backend
