// The reference executor: runs an ir::Graph on the CPU, in f32, to compute "eager" outputs natively
// and to run graphs read back from exported files.
//
// Compute dtypes: every float value (f32, f16, bf16, f64) is computed and stored as F32, every integer
// value as I64, booleans as Bool (one byte, 0 or 1). A 2-D weight that MatMul, Linear or Gather reads
// (through Transposes and widening Casts) is read where it lies in the mapped file, in its stored dtype,
// block by block (kernels_stored.cc): no f32 copy of it is made. Other float weights are converted to
// F32 when first used (once per Executor; the converted weights stay cached for later runs unless
// ExecOptions::cache_weights is false), integer weights to I64.
// A Cast to f16 or bf16 rounds each value to that type (round to nearest even) but stores the result
// back as F32; a Cast to f64 is F32; a Cast to a narrower integer wraps into its range and stays I64.
// So outputs come back in compute dtypes, whatever dtype the graph declares for them.
//
// Composite ops run through fused kernels by default; with use_composite_kernels = false each one
// runs through its decomposition (ir::op_schema(op).decompose, expanded once when the Executor is
// built), which is how the fused kernels are tested.
//
// Inputs are checked against the graph's inputs: names, dtypes, ranks, fixed dims, symbolic dims bound
// consistently across inputs and within the bounds of graph.symbols(), and declared sums
// (total = past + new). Violations are BadInput errors naming input, dim, value and bounds.
// Intermediate values are freed after their last use.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace hfx::runtime {

struct ExecOptions {
  // false: run each composite op through its decomposition into primitives.
  bool use_composite_kernels = true;
  // Names of intermediate values (of the graph given to the Executor) to return too, for
  // layer-by-layer diffs.
  std::vector<std::string> keep_values;
  // Check each computed value against the dtype, rank and dims the graph declares for it (fixed
  // dims, and symbols bound by the inputs). A mismatch is an Internal error: shape inference and the
  // kernels disagree.
  bool check_declared_shapes = true;
  // true: weights are kept between runs (those read in place as their mapped pages, the others
  // converted once), with every value computed from weights only (a folded constant): fastest, and
  // holds the model's pages. false: each run reads a weight when a node needs it and releases its
  // mapped pages after that node, and folds nothing across runs: a run holds one weight, not the
  // model. What verifying a model of any size in bounded memory needs.
  bool cache_weights = true;
  // With cache_weights false: the mapped pages of packed quantized weights read in place (MatMulNBits'
  // B), in graph order up to this many bytes, stay mapped between runs instead of being released after
  // their node. Mapping a page again costs the same whatever it holds, and a packed page holds 8 times
  // the values of an f32 one: re-mapping them was a tenth of an int4 check's time on the Qwen3-0.6B
  // shape, for 0.25 GB kept. Bounded like the held weights (pipeline::kHeldWeightLimit).
  int64_t kept_packed_bytes = 0;
  // The most bytes one tensor a node computes may take (0: no limit). Above it the run fails with a
  // BadInput naming the node, its op and the shape, before the tensor is allocated. Callers that run
  // a graph read from a file (hfx generate, hfx verify) set it from the contract with
  // contract_tensor_budget, so a graph cannot compute far more than its declared ports need.
  int64_t max_tensor_bytes = 0;
};

// A budget for ExecOptions::max_tensor_bytes, derived from the graph's contract at the sizes a caller
// runs: every symbolic dim of a declared input or output is `batch` when its symbol names a batch and
// `length` otherwise (at most the symbol's upper bound). It is the largest of
//  - 512 MiB: nothing a tiny graph does legitimately comes near it, and big models take the terms below;
//  - 16 x the largest declared input or output (state included) in 8-byte elements: the widest
//    intermediates (MLP activations, logits before a Softmax) are a small multiple of a port;
//  - batch x 256 heads x length^2 x 4 bytes: attention scores, larger than any port on long inputs
//    (256 is above the query head count of released models);
//  - 4 x the largest weight in f32: a weight transposed or dequantized by a node (a packed int4
//    weight holds two values per stored element, so its f32 form is 2x; 4x leaves a margin).
int64_t contract_tensor_budget(const ir::Graph& graph, int64_t batch, int64_t length);

class Executor {
 public:
  // The graph is copied (weights stay lazy references), so it need not outlive the Executor.
  explicit Executor(const ir::Graph& graph, ExecOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Inputs by graph input name; returns the graph outputs (and the kept values) by name, in compute
  // dtypes (see above).
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs);

  // Several runs in lockstep, node by node: each weight is read once for all of them (a streamed
  // weight's pages are mapped once and released after the node's last run), so the cost of reading the
  // weights, which streamed runs of a model-sized graph are bound by, is paid once. The same results
  // as run() on each input set in turn; activations of every run are alive together.
  std::vector<std::map<std::string, Tensor>> run_many(const std::vector<const std::map<std::string, Tensor>*>& inputs);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hfx::runtime
