#include "backends/onnx/checkpoint_mirror.h"

#include <algorithm>
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

// The index in `parts` of the stored tensor at `where`, appending make() the first time: a tensor that
// two stacks read (or one stack twice) is one initializer.
template <typename Where, typename Part, typename Make>
size_t part_index(std::map<Where, size_t>& seen, const Where& where, std::vector<Part>& parts, Make make) {
  auto [it, fresh] = seen.emplace(where, parts.size());
  if (fresh) parts.push_back(make());
  return it->second;
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
      auto at = written.whole_in(p, dir);
      if (!at) break;
      found.emplace_back(&p, *at);
    }
    if (found.empty() || found.size() != parts.size()) continue;
    std::vector<size_t> indices;
    for (const auto& f : found) {  // (no structured binding: a lambda may not capture one before C++20)
      const ir::WeightRef& p = *f.first;
      const ir::WrittenWeights::Location& at = f.second;
      indices.push_back(part_index(part_at, std::make_pair(at.file, at.offset), plan.parts, [&] {
        return CheckpointMirror::Part{part_name(graph, p, graph.value(id).name, part_names), p, {0, at.offset}, at.file};
      }));
    }
    plan.stacked[id] = std::move(indices);
  }
  return plan;
}

std::string mirror_file_name(const std::string& data_file, size_t i) {
  return i == 0 ? data_file : data_file + "_" + std::to_string(i);
}

std::optional<CheckpointMirror> plan_checkpoint_mirror(const ir::Graph& graph) {
  using Identity = MappedFile::Identity;
  struct Found {
    Identity file;
    size_t offset;
  };
  std::map<Identity, std::shared_ptr<const MappedFile>> files;
  std::map<Identity, std::map<size_t, size_t>> used;  // per file: offset -> bytes of each stored tensor read
  std::map<ir::ValueId, Found> stored;
  struct PartFound {
    ir::WeightRef weight;
    Found at;
    ir::ValueId stack;  // the first stack reading it (its name is the fallback for the part's)
  };
  std::vector<PartFound> parts;  // each stored tensor a stack reads, once
  std::map<std::pair<Identity, size_t>, size_t> part_at;
  std::map<ir::ValueId, std::vector<size_t>> stacked;
  auto found = [&](const ir::WeightRef& w) -> std::optional<Found> {
    auto at = w.stored_at();
    if (!at) return std::nullopt;
    const Identity id = at->file->identity();
    files.emplace(id, at->file);
    size_t& bytes = used[id][at->offset];
    bytes = std::max(bytes, w.nbytes());
    return Found{id, at->offset};
  };
  for (ir::ValueId id : graph.weights()) {
    const ir::WeightRef* w = graph.weight(id);
    if (!w || w->is_constant()) continue;
    if (auto at = found(*w)) {
      stored[id] = *at;
      continue;
    }
    if (auto stack = w->concat_parts(0); !stack.empty()) {
      std::vector<size_t> indices;
      for (const ir::WeightRef& p : stack) {
        auto at = found(p);
        if (!at) return std::nullopt;
        indices.push_back(part_index(part_at, std::make_pair(at->file, at->offset), parts, [&] { return PartFound{p, *at, id}; }));
      }
      stacked[id] = std::move(indices);
      continue;
    }
    if (w->nbytes() > kMirrorInlineLimit) return std::nullopt;  // computed bytes: the usual layout
  }
  if (files.empty()) return std::nullopt;

  CheckpointMirror plan;
  for (const auto& [id, file] : files) plan.files.push_back(file);
  std::sort(plan.files.begin(), plan.files.end(), [](const auto& a, const auto& b) { return a->path() < b->path(); });
  std::map<Identity, size_t> index;
  for (size_t i = 0; i < plan.files.size(); ++i) index[plan.files[i]->identity()] = i;
  // What a copy would hold that the graph does not read: the file's header (the bytes before its first
  // tensor the graph reads, at most 1 MiB: a safetensors index) and, past it, at most 1 % of the
  // tensors' bytes (those the graph reads in another form, cast or transposed, are in that 1 %).
  for (const auto& file : plan.files) {
    const auto& offsets = used.at(file->identity());
    size_t used_bytes = 0;
    for (const auto& [offset, bytes] : offsets) used_bytes += bytes;
    const size_t size = file->size(), first = offsets.begin()->first;
    if (first > (size_t(1) << 20) || first + used_bytes > size) return std::nullopt;
    if (size - first - used_bytes > (size - first) / 100) return std::nullopt;
    plan.tensor_bytes += used_bytes;
  }
  for (const auto& [id, at] : stored) plan.stored[id] = {index.at(at.file), at.offset};
  std::set<std::string> part_names;
  for (const PartFound& p : parts)
    plan.parts.push_back({part_name(graph, p.weight, graph.value(p.stack).name, part_names), p.weight,
                          {index.at(p.at.file), p.at.offset}, {}});
  plan.stacked = std::move(stacked);
  return plan;
}

}  // namespace hfx::onnx_backend
