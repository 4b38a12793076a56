// An hfx graph as a torch.export ExportedProgram: the `models/model.json` of a `.pt2` archive
// (torch/_export/serde/schema.yaml, schema 8.20, core-ATen functional form: verifiers ["ATEN"]).
//
// Every IR op lowers through one table (pt2_program.cc) to ATen ops named by their schema and called
// with their schema's argument names; views are written as their `_copy` forms, so every tensor is
// contiguous and its TensorMeta (sizes and strides) is exact. Shape arithmetic (Shape, Gather of a
// shape, Range bounds) becomes SymInt nodes (`aten.sym_size.int`, `_operator.*`) over the contract's
// symbols: each root dim is a torch symbol with its `--dim` bounds as a range constraint, a dim the
// contract relates (total_sequence_length = past_sequence_length + sequence_length) is that sum, and its
// own bounds become runtime asserts (`aten._assert_scalar`), as torch.export writes deferred asserts.
//
// Checkpoint weights are parameters (named by their checkpoint names), everything else the graph
// holds (rope tables, masks' constants, scalars) lifted tensor constants. Static-cache buffers (the
// component's shared_buffers) are user inputs the program mutates in place (USER_INPUT_MUTATION), so
// one tensor carries the cache across steps; their present.* outputs are that mutation, not returned.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/pt2/sym_expr.h"
#include "ir/graph.h"

namespace hfx::pt2_backend {

struct Pt2Tensor {
  std::string fqn;          // the state-dict / constants name torch loads it under
  ir::WeightRef weight;
};

// A tensor of the program as the lowering computed it: exact, where the JSON keeps sympy strings.
struct Pt2TensorInfo {
  DType dtype = DType::F32;
  std::vector<SymExpr> shape;
};

struct Pt2Program {
  nlohmann::json model;                // models/model.json
  std::vector<Pt2Tensor> parameters;   // data/weights, is_param
  std::vector<Pt2Tensor> constants;    // data/constants (lifted tensor constants)
  std::vector<std::string> ops;        // the ATen targets the program calls, sorted
  // What a program lowered further needs (the executorch backend starts from this program): every
  // tensor's shape and every SymInt's value over torch's symbols, and symbol i's contract dim and bounds.
  std::map<std::string, Pt2TensorInfo> tensors;
  std::map<std::string, SymExpr> sym_ints;
  std::vector<std::pair<std::string, SymbolBounds>> symbols;
};

struct Pt2LowerOptions {
  // (input, output) port pairs the program updates in place: the static cache.
  std::vector<std::pair<std::string, std::string>> shared_buffers;
};

// Unsupported naming the node and op when an op has no lowering (before anything is written).
Pt2Program lower_to_pt2(const ir::Graph& graph, const Pt2LowerOptions& options);

// The FX placeholder (argument) name of a port: not an identifier character becomes '_'
// ("past_key_values.0.key" -> "past_key_values_0_key").
std::string placeholder_name(const std::string& port);

// torch.export's serialized ScalarType number of a dtype (not c10's, not ExecuTorch's).
int serde_scalar_type(DType t);

}  // namespace hfx::pt2_backend
