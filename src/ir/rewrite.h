// Graph-to-graph rewriting: passes copy a graph node by node into a new one, replacing what they
// match. Weights are copied lazily on first use, so a rewrite that stops using a weight drops it.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "ir/graph.h"

namespace hfx::ir {

class Rewriter {
 public:
  explicit Rewriter(const Graph& src);
  // The source's inputs named in `computed` are not inputs of the target: the caller builds each one
  // in the target and remap()s it before copying the nodes that read it.
  Rewriter(const Graph& src, const std::set<std::string>& computed);
  const Graph& source() const { return src_; }
  Builder& builder() { return builder_; }
  Graph& target() { return dst_; }

  // The node with its inputs mapped into the target graph (weights copied on demand).
  Node mapped(const Node& node);
  // New id of a source value (copying a weight the first time it is used).
  ValueId map(ValueId src_id);
  // Copies `node` (already mapped) unchanged, keeping its name and its outputs' names.
  void copy(const Node& src_node, const Node& mapped_node);
  // Records that `src_node`'s outputs are now `values`; they take the source outputs' names.
  void replace(const Node& src_node, const std::vector<ValueId>& values);
  // Declares what a source value becomes in the target (a weight with a folded transform, an input
  // computed in the graph instead, a graph output rebuilt); readers mapped afterwards read `dst_id`.
  void remap(ValueId src_id, ValueId dst_id) { map_[size_t(src_id)] = dst_id; }

  // Finishes: graph outputs mapped, unused nodes pruned.
  Graph finish();

 private:
  const Graph& src_;
  Graph dst_;
  Builder builder_;
  std::vector<ValueId> map_;
};

// Drops nodes that nothing reads (and weights only they read).
Graph prune(const Graph& graph);
// Number of nodes reading each value, plus one for each graph output it is.
std::vector<int> use_counts(const Graph& graph);
// The node that computes `id` (nullptr for inputs, weights and kNone): how passes match patterns.
const Node* producer(const Graph& g, ValueId id);
// The scope `levels` levels above a node's name: "/model/layers.0/self_attn/Attention" ->
// "model/layers.0/self_attn" (1), "model/layers.0" (2); what a rewrite builds its nodes under. Level 0,
// the node's own name, scopes what replaces one node: the names the rewriter gives new nodes cannot
// meet the copied nodes' (a scope's counters start afresh in the target graph).
std::string scope_of(const std::string& node_name, int levels = 1);

}  // namespace hfx::ir
