// The lowering table of the executorch backend: each core-ATen op a pt2 program calls, as the
// ExecuTorch out-variant kernel that computes it and that kernel's schema arguments in order, with
// the defaults ExecuTorch needs materialised (a KernelCall passes every argument, then `out`, then
// the returned value). Kernel names are those ExecuTorch 1.5's portable library registers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hfx::executorch_backend {

struct EtArgSpec {
  enum class Default { Required, Null, Int, Bool, EmptyIntList } kind = Default::Required;
  std::string name;
  int64_t value = 0;  // Int / Bool default
};

struct EtOpSpec {
  std::string name, overload;       // "aten::add", "out"
  std::vector<EtArgSpec> args;      // schema arguments before `out`
};

// pt2 target ("torch.ops.aten.add.Tensor") -> kernel. aten.matmul, sym_size and `_operator`
// arithmetic are lowered by hand in et_program.cc; runtime asserts are dropped (the bounds are the
// tensors' DYNAMIC_BOUND capacities).
const std::map<std::string, EtOpSpec>& et_op_table();

}  // namespace hfx::executorch_backend
