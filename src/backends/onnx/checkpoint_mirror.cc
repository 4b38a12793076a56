#include "backends/onnx/checkpoint_mirror.h"

#include <set>

namespace fs = std::filesystem;

namespace hfx::onnx_backend {

namespace {

// A name for a part's initializer: its checkpoint tensor's, unless the graph or another part has it.
std::string part_name(const ir::Graph& graph, const ir::WeightRef& part, const std::string& whole,
                      std::set<std::string>& taken) {
  const auto sources = part.source_names();
  std::string name = sources.empty() ? whole + ".part" : sources.front();
  while (graph.find(name) || taken.count(name)) name += ".stored";
  taken.insert(name);
  return name;
}

}  // namespace

CheckpointMirror plan_shared_stacks(const ir::Graph& graph, const ir::WrittenWeights& written, const fs::path& dir) {
  CheckpointMirror plan;
  std::map<std::pair<fs::path, size_t>, size_t> part_at;  // (file, offset) -> index into plan.parts
  std::set<std::string> part_names;
  for (ir::ValueId id : graph.weights()) {
    const ir::WeightRef* w = graph.weight(id);
    const auto parts = w ? w->concat_parts(0) : std::vector<ir::WeightRef>{};
    std::vector<std::pair<const ir::WeightRef*, ir::WrittenWeights::Location>> found;
    for (const ir::WeightRef& p : parts) {
      auto at = written.whole(p);
      if (!at || at->file.parent_path().lexically_normal() != dir.lexically_normal()) break;
      found.emplace_back(&p, *at);
    }
    if (found.empty() || found.size() != parts.size()) continue;
    std::vector<size_t> indices;
    for (const auto& [p, at] : found) {
      auto [it, fresh] = part_at.emplace(std::make_pair(at.file, at.offset), plan.parts.size());
      if (fresh) plan.parts.push_back({part_name(graph, *p, graph.value(id).name, part_names), *p, at.offset, at.file});
      indices.push_back(it->second);
    }
    plan.stacked[id] = std::move(indices);
  }
  return plan;
}

std::optional<CheckpointMirror> plan_checkpoint_mirror(const ir::Graph& graph) {
  CheckpointMirror plan;
  std::map<size_t, size_t> used;        // offset -> bytes of each stored tensor the graph reads
  std::map<size_t, size_t> part_at;     // offset -> index into plan.parts
  std::set<std::string> part_names;
  auto same_file = [&](const ir::WeightRef::StoredAt& at) {
    if (!plan.file) plan.file = at.file;
    return plan.file->identity() == at.file->identity();
  };
  for (ir::ValueId id : graph.weights()) {
    const ir::WeightRef* w = graph.weight(id);
    if (!w || w->is_constant()) continue;
    if (auto at = w->stored_at()) {
      if (!same_file(*at)) return std::nullopt;
      plan.stored[id] = at->offset;
      used[at->offset] = std::max(used[at->offset], w->nbytes());
      continue;
    }
    if (auto parts = w->concat_parts(0); !parts.empty()) {
      std::vector<size_t> indices;
      for (const ir::WeightRef& p : parts) {
        auto at = p.stored_at();
        if (!at || !same_file(*at)) return std::nullopt;
        used[at->offset] = std::max(used[at->offset], p.nbytes());
        auto [it, fresh] = part_at.emplace(at->offset, plan.parts.size());
        if (fresh) plan.parts.push_back({part_name(graph, p, graph.value(id).name, part_names), p, at->offset, {}});
        indices.push_back(it->second);
      }
      plan.stacked[id] = std::move(indices);
      continue;
    }
    if (w->nbytes() > kMirrorInlineLimit) return std::nullopt;  // computed bytes: the usual layout
  }
  if (!plan.file) return std::nullopt;
  // What the copy would hold that the graph does not read: the file's header (the bytes before its
  // first tensor the graph reads, at most 1 MiB: a safetensors index) and, past it, at most 1 % of the
  // tensors' bytes (those the graph reads in another form, cast or transposed, are in that 1 %).
  size_t used_bytes = 0;
  for (const auto& [offset, bytes] : used) used_bytes += bytes;
  const size_t size = plan.file->size(), first = used.begin()->first;
  if (first > (size_t(1) << 20) || first + used_bytes > size) return std::nullopt;
  if (size - first - used_bytes > (size - first) / 100) return std::nullopt;
  plan.tensor_bytes = used_bytes;
  return plan;
}

}  // namespace hfx::onnx_backend
