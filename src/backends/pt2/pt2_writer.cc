#include "backends/pt2/pt2_writer.h"

#include <fmt/format.h>

#include "backends/pt2/pt2_archive.h"
#include "core/error.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hfx::pt2_backend {

namespace {

json tensor_meta_of(const ir::WeightRef& w) {
  json sizes = json::array(), strides = json::array();
  const auto& shape = w.shape();
  std::vector<int64_t> st(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) st[i - 1] = st[i] * shape[i];
  for (size_t i = 0; i < shape.size(); ++i) {
    sizes.push_back({{"as_int", shape[i]}});
    strides.push_back({{"as_int", st[i]}});
  }
  return {{"dtype", serde_scalar_type(w.dtype())}, {"sizes", sizes}, {"requires_grad", false},
          {"device", {{"type", "cpu"}, {"index", nullptr}}}, {"strides", strides},
          {"storage_offset", {{"as_int", 0}}}, {"layout", 7}};
}

}  // namespace

Pt2Written write_pt2(const ir::Graph& graph, const fs::path& dir, const Pt2WriteOptions& options) {
  Pt2Program program = lower_to_pt2(graph, options.lowering);
  fs::create_directories(dir);
  Pt2Written out;
  out.file = dir / options.file_name;
  out.ops = program.ops;
  // The zip's root folder: torch takes it from the first entry, and names it after the file.
  Pt2Archive zip(out.file, fs::path(options.file_name).stem().string());
  // Config entries first, then the tensors (torch reads by name, in any order).
  json weights_config = {{"config", json::object()}}, constants_config = {{"config", json::object()}};
  int64_t index = 0, done = 0;
  for (const auto& p : program.parameters)
    weights_config["config"][p.fqn] = {{"path_name", fmt::format("weight_{}", index++)}, {"is_param", true}, {"use_pickle", false},
                                       {"tensor_meta", tensor_meta_of(p.weight)}};
  index = 0;
  for (const auto& c : program.constants)
    constants_config["config"][c.fqn] = {{"path_name", fmt::format("tensor_{}", index++)}, {"is_param", false}, {"use_pickle", false},
                                         {"tensor_meta", tensor_meta_of(c.weight)}};
  zip.add_text("archive_format", "pt2");
  zip.add_text("archive_version", "0");
  zip.add_text(".data/version", "6\n");
  zip.add_text("byteorder", "little");
  zip.add_text("models/model.json", program.model.dump());
  zip.add_text("data/weights/model_weights_config.json", weights_config.dump());
  zip.add_text("data/constants/model_constants_config.json", constants_config.dump());
  zip.add_text("data/sample_inputs/model.pt", "");
  auto written = [&](int64_t bytes) {
    ++done;
    if (options.on_weight_written) options.on_weight_written(1, bytes);
  };
  index = 0;
  for (const auto& p : program.parameters) {
    out.weight_bytes += int64_t(p.weight.nbytes());
    out.source_bytes_read += int64_t(p.weight.source_bytes());
    zip.add_tensor(fmt::format("data/weights/weight_{}", index++), p.weight, written);
  }
  index = 0;
  for (const auto& c : program.constants) {
    out.weight_bytes += int64_t(c.weight.nbytes());
    zip.add_tensor(fmt::format("data/constants/tensor_{}", index++), c.weight, written);
  }
  with_context(out.file.string(), [&] { zip.close(); });
  return out;
}

}  // namespace hfx::pt2_backend
