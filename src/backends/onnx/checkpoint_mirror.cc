#include "backends/onnx/checkpoint_mirror.h"

#include <set>

namespace hfx::onnx_backend {

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
        if (fresh) {
          // The checkpoint tensor's name, unless the graph or another part has it already.
          const auto sources = p.source_names();
          std::string name = sources.empty() ? graph.value(id).name + ".part" : sources.front();
          while (graph.find(name) || part_names.count(name)) name += ".stored";
          part_names.insert(name);
          plan.parts.push_back({name, p, at->offset});
        }
        indices.push_back(it->second);
      }
      plan.stacked[id] = std::move(indices);
      continue;
    }
    if (w->nbytes() > kMirrorInlineLimit) return std::nullopt;  // computed bytes: the usual layout
  }
  if (!plan.file) return std::nullopt;
  size_t used_bytes = 0;
  for (const auto& [offset, bytes] : used) used_bytes += bytes;
  const size_t size = plan.file->size();
  if (used_bytes > size || size - used_bytes > size / 100 + (size_t(1) << 20)) return std::nullopt;
  return plan;
}

}  // namespace hfx::onnx_backend
