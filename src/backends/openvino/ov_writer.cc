#include "backends/openvino/ov_writer.h"

#include <fmt/format.h>

#include <openvino/core/graph_util.hpp>
#include <openvino/pass/serialize.hpp>
#include <openvino/core/model.hpp>
#include <openvino/core/version.hpp>
#include <openvino/op/ops.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <streambuf>

#include "backends/openvino/ov_lowering.h"
#include "backends/openvino/ov_stateful.h"
#include "core/error.h"
#include "core/mapped_file.h"

namespace fs = std::filesystem;

namespace hfx::openvino_backend {

namespace {

constexpr size_t kInMemoryLimit = 1024;  // constants up to this many bytes are copied into the model
constexpr size_t kScratchAlignment = 64;

void check_plain_file_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || !name.ends_with(".xml"))
    bad_input("openvino: model file `{}` must be a plain file name ending in .xml", name);
}

ov::PartialShape partial_shape(const Shape& shape) {
  std::vector<ov::Dimension> dims;
  for (const Dim& d : shape) dims.push_back(d.is_fixed() ? ov::Dimension(d.value) : ov::Dimension::dynamic());
  return ov::PartialShape(dims);
}

ov::Shape static_shape(const std::vector<int64_t>& dims) {
  ov::Shape s;
  for (int64_t d : dims) s.push_back(size_t(d));
  return s;
}

// Materialised weights, appended one at a time to a scratch file that is mapped once complete.
class ScratchWeights {
 public:
  explicit ScratchWeights(fs::path path) : path_(std::move(path)) {}
  ~ScratchWeights() {
    if (file_) std::fclose(file_);
    map_.reset();
    std::error_code ec;
    fs::remove(path_, ec);
  }
  ScratchWeights(const ScratchWeights&) = delete;
  ScratchWeights& operator=(const ScratchWeights&) = delete;

  size_t append(const void* data, size_t size) {
    if (!file_) {
      file_ = std::fopen(path_.c_str(), "wb");
      if (!file_) fail(ErrorKind::Io, "{}: cannot create: {}", path_.string(), std::strerror(errno));
    }
    static const char zeros[kScratchAlignment] = {};
    const size_t offset = (written_ + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
    if (offset > written_) put(zeros, offset - written_);
    put(data, size);
    return offset;
  }
  // Closes the file and maps it; returns nullptr when nothing was written.
  std::shared_ptr<const MappedFile> map() {
    if (!file_) return nullptr;
    std::FILE* f = file_;
    file_ = nullptr;
    if (std::fclose(f) != 0) fail(ErrorKind::Io, "{}: write failed: {}", path_.string(), std::strerror(errno));
    map_ = MappedFile::open(path_);
    return map_;
  }

 private:
  void put(const void* data, size_t size) {
    if (size > 0 && std::fwrite(data, 1, size, file_) != size)
      fail(ErrorKind::Io, "{}: write failed: {}", path_.string(), std::strerror(errno));
    written_ += size;
  }
  fs::path path_;
  std::FILE* file_ = nullptr;
  size_t written_ = 0;
  std::shared_ptr<const MappedFile> map_;
};

// model.bin as the serialiser writes it: after every kReleaseEvery bytes `release` runs, so the mapped
// pages the serialiser has read so far (checkpoint and scratch file) leave the resident set, and the
// write of a large model stays near kReleaseEvery of resident memory instead of the model's size.
class ReleasingFileBuf final : public std::streambuf {
 public:
  static constexpr size_t kReleaseEvery = size_t(64) << 20;
  ReleasingFileBuf(fs::path path, std::function<void()> release) : path_(std::move(path)), release_(std::move(release)) {
    file_ = std::fopen(path_.c_str(), "wb");
    if (!file_) fail(ErrorKind::Io, "{}: cannot create: {}", path_.string(), std::strerror(errno));
  }
  ~ReleasingFileBuf() override {
    if (file_) std::fclose(file_);
  }
  void close() {
    std::FILE* f = file_;
    file_ = nullptr;
    if (std::fclose(f) != 0) fail(ErrorKind::Io, "{}: write failed: {}", path_.string(), std::strerror(errno));
  }

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    put(s, size_t(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    put(&ch, 1);
    return c;
  }
  // tellp(): the serialiser may ask where the next tensor starts.
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode) override {
    if (off == 0 && dir == std::ios_base::cur) return pos_type(off_type(written_));
    return pos_type(off_type(-1));
  }

 private:
  void put(const char* s, size_t n) {
    if (n > 0 && std::fwrite(s, 1, n, file_) != n)
      fail(ErrorKind::Io, "{}: write failed: {}", path_.string(), std::strerror(errno));
    written_ += n;
    since_release_ += n;
    if (since_release_ >= kReleaseEvery) {
      release_();
      since_release_ = 0;
    }
  }
  fs::path path_;
  std::function<void()> release_;
  std::FILE* file_ = nullptr;
  size_t written_ = 0, since_release_ = 0;
};

// OpenVINO's messages start with the source location and span lines; keep the last non-empty line
// that says what is wrong.
std::string first_line(const std::string& what) {
  std::string best;
  size_t start = 0;
  while (start <= what.size()) {
    size_t end = what.find('\n', start);
    if (end == std::string::npos) end = what.size();
    std::string line = what.substr(start, end - start);
    if (!line.empty() && line.find_first_not_of(' ') != std::string::npos) best = line;
    start = end + 1;
  }
  return best.empty() ? what : best;
}

}  // namespace

std::string openvino_version() { return ov::get_openvino_version().buildNumber; }

OvWriteResult write_openvino(const ir::Graph& graph, const fs::path& out_dir, const OvWriteOptions& opts) {
  check_plain_file_name(opts.model_file);
  {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) fail(ErrorKind::Io, "{}: cannot create: {}", out_dir.string(), ec.message());
  }
  OvWriteResult result;
  result.xml_path = out_dir / opts.model_file;
  result.bin_path = result.xml_path;
  result.bin_path.replace_extension(".bin");

  // Every node has a lowering, or nothing is read or written.
  for (const ir::Node& node : graph.nodes())
    if (!find_ov_lowering(node.op)) unsupported("openvino: op {} (node {}) has no lowering", node.op, node.name);

  std::vector<ov::Output<ov::Node>> values(graph.num_values());

  // Weights: small ones in memory, stored ones shared with the mapped checkpoint, transformed ones
  // through the scratch file (see the header).
  ScratchWeights scratch(out_dir / (opts.model_file + ".weights.tmp"));
  struct Deferred {
    ir::ValueId id;
    size_t offset;
  };
  std::vector<Deferred> deferred;
  std::set<std::shared_ptr<const MappedFile>> reused_maps;
  for (ir::ValueId id : graph.weights()) {
    const ir::Value& value = graph.value(id);
    const ir::WeightRef* w = graph.weight(id);
    HFX_CHECK(w, "weight value {} has no WeightRef", value.name);
    with_context("openvino: weight " + value.name, [&] {
      const auto et = ov_element_type(w->dtype());
      const auto shape = static_shape(w->shape());
      std::shared_ptr<ov::op::v0::Constant> c;
      std::optional<ir::WrittenWeights::Bytes> reused;
      if (opts.written) reused = opts.written->bytes(*w);
      if (!reused) result.source_bytes_read += int64_t(w->source_bytes());
      if (reused) {
        // From what an earlier writer of this export wrote: zero copy from its mapped file (kept alive
        // by the constant), or a copy of a small tensor it stored inline.
        if (w->nbytes() <= kInMemoryLimit) {
          c = std::make_shared<ov::op::v0::Constant>(et, shape, reused->bytes.data());
        } else if (!reused->map) {
          // Gathered from a part of a packed tensor (q^T out of the ort profile's q|k|v): through the
          // scratch file, so the copies are not all held until serialisation.
          deferred.push_back({id, scratch.append(reused->bytes.data(), reused->bytes.size())});
        } else {
          c = std::make_shared<ov::op::v0::Constant>(et, shape, reused->bytes.data(), std::const_pointer_cast<void>(reused->owner));
          reused_maps.insert(reused->map);
        }
        result.reused_bytes += int64_t(reused->bytes.size());
      } else if (w->is_constant() || w->nbytes() <= kInMemoryLimit) {
        Tensor t = w->materialize();
        c = std::make_shared<ov::op::v0::Constant>(et, shape, t.data());
      } else if (auto raw = w->raw_bytes()) {
        // Zero copy: the constant keeps the weight (and with it the mapped file) alive.
        auto owner = std::make_shared<ir::WeightRef>(*w);
        c = std::make_shared<ov::op::v0::Constant>(et, shape, raw->data(), owner);
      } else {
        Tensor t = w->materialize();  // dropped at the end of this weight
        deferred.push_back({id, scratch.append(t.data(), t.nbytes())});
        w->release_source_pages();
      }
      if (c) {
        c->set_friendly_name(value.name);
        c->output(0).get_tensor().set_names({value.name});
        values[size_t(id)] = c;
      }
    });
    ++result.num_weights;
    if (opts.on_weight_written) opts.on_weight_written(1, int64_t(w->nbytes()));
  }
  std::shared_ptr<const MappedFile> scratch_map = scratch.map();
  if (auto map = scratch_map) {
    auto owner = std::const_pointer_cast<MappedFile>(map);
    for (const auto& d : deferred) {
      const ir::Value& value = graph.value(d.id);
      const ir::WeightRef* w = graph.weight(d.id);
      auto c = std::make_shared<ov::op::v0::Constant>(ov_element_type(w->dtype()), static_shape(w->shape()),
                                                      map->data() + d.offset, owner);
      c->set_friendly_name(value.name);
      c->output(0).get_tensor().set_names({value.name});
      values[size_t(d.id)] = c;
    }
  }

  ov::ParameterVector params;
  for (ir::ValueId id : graph.inputs()) {
    const ir::Value& v = graph.value(id);
    auto p = std::make_shared<ov::op::v0::Parameter>(ov_element_type(v.dtype), partial_shape(v.shape));
    p->set_friendly_name(v.name);
    p->output(0).get_tensor().set_names({v.name});
    params.push_back(p);
    values[size_t(id)] = p;
  }

  for (const ir::Node& node : graph.nodes()) {
    LowerContext ctx{graph, node, {}};
    for (ir::ValueId in : node.inputs) {
      if (in == ir::kNone) {
        ctx.inputs.emplace_back();
        continue;
      }
      HFX_CHECK(values[size_t(in)].get_node(), "node {}: input {} is not defined yet", node.name, graph.value(in).name);
      ctx.inputs.push_back(values[size_t(in)]);
    }
    ov::OutputVector outs = with_context("openvino: node " + node.name + " (" + node.op + ")", [&] {
      try {
        return (*find_ov_lowering(node.op))(ctx);
      } catch (const ov::Exception& e) {  // OpenVINO's own validation of the node it was asked to build
        fail(ErrorKind::Internal, "OpenVINO rejected the lowering: {}", first_line(e.what()));
      }
    });
    HFX_CHECK(outs.size() == node.outputs.size(), "node {}: lowering gave {} outputs for {}", node.name, outs.size(),
              node.outputs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      const auto& want = graph.value(node.outputs[i]);
      if (outs[i].get_element_type() != ov_element_type(want.dtype))
        fail(ErrorKind::Internal, "openvino: node {} ({}): output {} is {} in OpenVINO, {} in the IR", node.name, node.op, want.name,
                 outs[i].get_element_type().to_string(), dtype_name(want.dtype));
      outs[i].get_node()->set_friendly_name(node.name);
      values[size_t(node.outputs[i])] = outs[i];
    }
  }

  ov::ResultVector results;
  for (ir::ValueId id : graph.outputs()) {
    const ir::Value& v = graph.value(id);
    ov::Output<ov::Node> out = values[size_t(id)];
    // A tensor has one set of names: an output that is also an input, a weight or another output
    // gets its own copy.
    if (!out.get_names().empty()) out = std::make_shared<ov::op::v16::Identity>(out);
    out.get_tensor().set_names({v.name});
    auto r = std::make_shared<ov::op::v0::Result>(out);
    r->set_friendly_name(v.name + "/sink_port_0");
    results.push_back(r);
  }

  auto model = std::make_shared<ov::Model>(results, params, graph.name());
  for (const auto& [key, value] : opts.metadata) model->set_rt_info(value, "hfx", key);
  if (opts.stateful) with_context("openvino: stateful", [&] { make_stateful(model, opts.state); });
  model->validate_nodes_and_infer_types();
  // Nodes built inside a lowering (and by the stateful rewrite) have no name of ours; OpenVINO would
  // name them from a process-wide counter ("Multiply_1234"), so the XML would depend on what the
  // process built before (`hfx verify` re-exports after loading models). Name them by position.
  size_t unnamed = 0;
  for (const auto& op : model->get_ordered_ops())
    if (op->get_friendly_name() == op->get_name()) op->set_friendly_name(fmt::format("{}_{}", op->get_type_name(), unnamed++));

  auto release_all = [&] {
    for (ir::ValueId id : graph.weights()) graph.weight(id)->release_source_pages();
    if (scratch_map) scratch_map->release(0, scratch_map->size());
    for (const auto& map : reused_maps) map->release(0, map->size());
  };
  try {
    std::ofstream xml(result.xml_path, std::ios::binary);
    if (!xml) fail(ErrorKind::Io, "{}: cannot create: {}", result.xml_path.string(), std::strerror(errno));
    ReleasingFileBuf bin_buf(result.bin_path, release_all);
    std::ostream bin(&bin_buf);
    ov::pass::Serialize(xml, bin).run_on_model(model);
    xml.close();
    if (!xml || !bin) fail(ErrorKind::Io, "{}: write failed", result.xml_path.string());
    bin_buf.close();
  } catch (const ov::Exception& e) {
    fail(ErrorKind::Io, "{}: OpenVINO could not serialise the model: {}", result.xml_path.string(), first_line(e.what()));
  }
  model.reset();  // drops the constants' hold on the mapped files
  release_all();
  std::error_code ec;
  result.bin_bytes = int64_t(fs::file_size(result.bin_path, ec));
  return result;
}

}  // namespace hfx::openvino_backend
