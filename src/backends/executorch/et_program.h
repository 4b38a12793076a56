// An ExecuTorch program as hfx plans it, before it is a flatbuffer: methods made of EValues and
// kernel calls on ExecuTorch's out-variant kernels, constants, and one memory-planned arena.
//
// The forward method is lowered from the PyTorch program of the same graph (backends/pt2: core ATen,
// functional, `_copy` views, SymInt shape arithmetic), as ExecuTorch's own to_edge/to_executorch
// starts from a torch.export ExportedProgram: each ATen call becomes its `.out` kernel with every
// schema argument materialised (et_ops.cc), a SymInt becomes an `Int` EValue that `aten::sym_size.int`
// and `executorch_prim::*` calls compute at run time, and the static cache's buffers (the pt2
// program's mutated user inputs) become mutable buffers the method keeps between calls: planned in a
// region of the arena nothing else reuses, written back with `aten::copy_` at the end of each call.
//
// Shapes that depend on a contract symbol are DYNAMIC_BOUND, sized and planned at their upper bound
// (every symbol needs a max); kernels resize their outputs to the actual sizes at run time.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/pt2/pt2_program.h"
#include "ir/weight.h"

namespace hfx::executorch_backend {

struct EtTensor {
  int scalar_type = 6;            // ExecuTorch's (c10's) numbering: FLOAT 6, LONG 4, BOOL 11, ...
  std::vector<int64_t> sizes;     // upper bounds when dynamic
  bool dynamic = false;           // DYNAMIC_BOUND
  uint32_t constant = 0;          // data_buffer_idx: 1-based index into the program's constants, 0 = planned
  int64_t offset = -1;            // arena offset (memory_id 1) of a planned tensor
  std::string fqn;                // a mutable buffer's name (extra_tensor_info.fully_qualified_name)
  int64_t nbytes() const;
};

struct EtValue {
  enum class Kind { Null, Int, Bool, Double, String, IntList, TensorList, OptionalTensorList, Tensor } kind = Kind::Null;
  int64_t i = 0;
  bool b = false;
  double d = 0;
  std::string s;
  std::vector<int64_t> items;  // IntList / TensorList / OptionalTensorList: EValue indices (-1: None)
  EtTensor tensor;
};

struct EtCall {
  int op = 0;             // index into EtMethod::operators, or into EtMethod::delegates for a delegate call
                          // (-1 while lowering: a linear layer only an XNNPACK graph computes)
  std::vector<int> args;  // EValue indices: schema arguments, then out, then the returned value
                          // (a delegate call: its inputs, then its outputs)
  bool delegate = false;
};

struct EtMethod {
  std::string name;
  std::vector<EtValue> values;
  std::vector<int> inputs, outputs;
  std::vector<std::pair<std::string, std::string>> operators;  // (name, overload)
  std::vector<EtCall> calls;
  std::vector<size_t> delegates;  // XnnpackBackend delegates: indices into EtProgram::delegate_blobs
  int64_t arena_bytes = 0;  // non_const_buffer_sizes[1]
};

struct EtProgram {
  std::vector<EtMethod> methods;           // forward first, then the metadata methods
  std::vector<ir::WeightRef> constants;    // constant k is data_buffer_idx k + 1
  std::vector<std::string> delegate_blobs;  // XNNPACK payloads, one segment each
  // Weights the delegates take by name (Program.named_data), one segment each.
  std::vector<std::pair<std::string, ir::WeightRef>> named_data;
  std::vector<std::string> kernels;        // "aten::mm.out", ... the forward method calls, sorted
  int64_t xnnpack_calls = 0, xnnpack_nodes = 0;  // the forward method's delegate calls, and the nodes of their graphs
  int64_t arena_bytes = 0, buffer_bytes = 0;  // the planned arena, and the part the mutable buffers hold
};

struct EtLowerOptions {
  // (input, output) port pairs of the static cache: the inputs become mutable buffers.
  std::vector<std::pair<std::string, std::string>> shared_buffers;
  // Metadata methods ExecuTorch's LLM runner reads (get_max_seq_len, get_vocab_size, use_kv_cache, ...):
  // name -> Int (Bool when `is_bool`), and the list-valued ones (get_eos_ids).
  struct Constant {
    std::string name;
    int64_t value = 0;
    bool is_bool = false;
  };
  std::vector<Constant> metadata;
  std::vector<int64_t> eos_ids;
  // Every run of calls XNNPACK has nodes for (linear layers with constant weights, elementwise and norm
  // arithmetic, the attention matmuls, softmax, reshapes, ...) becomes one XNNPACK delegate call
  // (et_xnnpack_partition.h); otherwise portable kernels only.
  bool xnnpack = false;
};

// Unsupported naming the node and its ATen op when a kernel is missing, or a dim without an upper bound.
EtProgram lower_to_executorch(const pt2_backend::Pt2Program& program, const EtLowerOptions& options);

// ExecuTorch's ScalarType number of a dtype.
int et_scalar_type(DType t);

}  // namespace hfx::executorch_backend
