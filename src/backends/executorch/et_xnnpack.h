// The XNNPACK delegate's payload: one XNNGraph (schema/xnnpack.fbs, identifier XN01) behind the
// 32-byte `XH00` header, as ExecuTorch's XnnpackBackend compiles it at load time: a 1:1 description
// of XNNPACK subgraph calls (xnn_define_tensor_value, xnn_define_fully_connected, ...). A graph holds
// several nodes: its external values are the DelegateCall's args (inputs, then outputs, external id k
// = args[k]), its constants are weights the program's named data holds, and the values between its
// nodes are XNNPACK's own. Shapes are upper bounds; XNNPACK reshapes the graph at run time from the
// external inputs' actual sizes (one dim of a reshape marked 0 is inferred).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hfx::executorch_backend {

struct XnnValue {
  bool f16 = false;                 // fp16, else fp32 (or qcint8 with int8_scales)
  std::vector<int64_t> dims;        // upper bounds
  int external = -1;                // external id (the DelegateCall arg), -1 internal or constant
  bool output = false;              // an external output (else an external input)
  std::string named_key;            // non-empty: a constant, the program's named data of that key
  std::vector<float> int8_scales;   // non-empty: an int8 constant, one scale per row (qcint8, channel_dim 0)
};

enum class XnnKind {
  FullyConnected, BatchMatrixMultiply, Add, Subtract, Multiply, Divide, Negate, Sigmoid, Tanh, Exp, Log, Sin, Cos,
  SquareRoot, ReciprocalSquareRoot, Softmax, StaticTranspose, StaticReshape, StaticSlice, Concatenate, Convert,
  Copy, GlobalAvgPooling2d,
};

// The XNode name of a kind, as XNNPACK's schema spells it ("XNNFullyConnected", ...).
const char* xnn_kind_name(XnnKind k);

struct XnnNode {
  XnnKind kind;
  std::vector<uint32_t> inputs;    // value ids; FullyConnected: input, filter, [bias]
  uint32_t output = 0;
  std::vector<int64_t> params;     // transpose: perm; reshape: new shape (0: inferred); slice: offsets then sizes;
                                   // concatenate: {axis}
  uint32_t flags = 0;
};

struct XnnGraph {
  std::vector<XnnValue> values;    // id = index; the externals first, in external-id order
  std::vector<XnnNode> nodes;      // in execution order
};

// The processed blob of one XNNPACK graph.
std::string xnnpack_payload(const XnnGraph& graph);

}  // namespace hfx::executorch_backend
