// What a task makes of a model: components, each one graph with its role and its I/O contract.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ir/builder.h"
#include "ir/graph.h"
#include "tasks/state_names.h"

namespace hfx::tasks {

struct IoSpec {
  std::string name;
  DType dtype;
  Shape shape;
};

struct Component {
  std::string role;       // decoder | prefill | decode (causal-lm), encoder (feature-extraction)
  std::string file_stem;  // model | prefill | decode
  ir::Graph graph;
  std::vector<IoSpec> inputs, outputs;
  // (input, output) pairs a runtime may bind to one buffer: the static cache's in-place update.
  std::vector<std::pair<std::string, std::string>> shared_buffers;
  // The state its steps carry, named by the contract (tasks/state.h); empty for an encoder.
  std::vector<StatePort> state;
  // Clients load this graph alone, fetching its weights from `<file>_data` by name (Optimum's and
  // transformers.js's encoder-decoder graphs): a writer must not point it at another graph's copy.
  bool own_weight_files = false;
};

// Names each of `values` by the contract's output of the same index (c.outputs), declares its shape
// and makes it a graph output; an input passed through as is gets an Identity to carry the name.
void name_outputs(Component& c, ir::Builder& b, const std::vector<ir::ValueId>& values);
// Drops the bounds and relations of the symbols no input or output of `g` uses.
void keep_used_symbols(ir::Graph& g);

}  // namespace hfx::tasks
