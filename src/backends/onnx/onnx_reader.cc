#include "backends/onnx/onnx_reader.h"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backends/onnx/onnx_writer.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/safe_path.h"
#include "core/tensor.h"
#include "ir/ops.h"

namespace fs = std::filesystem;

namespace hfx::onnx_backend {

namespace {

constexpr int64_t kMinOpset = 18;  // ReduceMean/ReduceMax take `axes` as an input from 18 on

DType read_dtype(int32_t elem_type, const std::string& what) {
  auto dtype = dtype_from_onnx(elem_type);
  if (!dtype)
    unsupported("{} has ONNX element type {}, which hfx does not handle", what,
                onnx::TensorProto_DataType_IsValid(elem_type)
                    ? onnx::TensorProto_DataType_Name(onnx::TensorProto_DataType(elem_type))
                    : std::to_string(elem_type));
  return *dtype;
}

size_t checked_nbytes(const std::vector<int64_t>& dims, DType dtype, const std::string& what) {
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) bad_input("{} has a negative dim {}", what, d);
    if (__builtin_mul_overflow(n, uint64_t(d), &n)) bad_input("{} is too large", what);
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(n, uint64_t(dtype_size(dtype)), &bytes) || bytes > uint64_t(SIZE_MAX)) bad_input("{} is too large", what);
  return dtype_nbytes(dtype, size_t(n));  // n elements; 4-bit types: ceil(n / 2), packed
}

uint64_t parse_u64(const std::string& s, const std::string& what) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    bad_input("{} `{}` is not a non-negative integer", what, s);
  return v;
}

// Typed-field storage (float_data, int32_data, ...) of an inline tensor, as raw little-endian bytes.
template <typename Out, typename Field>
void copy_field(const Field& field, size_t numel, Tensor& t, const char* field_name) {
  if (size_t(field.size()) != numel)
    bad_input("{} holds {} values for {} elements", field_name, field.size(), numel);
  Out* out = t.as<Out>();
  for (size_t i = 0; i < numel; ++i) out[i] = Out(field.Get(int(i)));
}

using Raisings = std::map<std::string, std::pair<std::string, const OpLowering*>>;

class Reader {
 public:
  explicit Reader(fs::path model_path)
      : model_path_(std::move(model_path)), base_dir_(model_path_.parent_path()) {}

  ir::Graph read() {
    // Mapped, not read whole; protobuf parses at most INT_MAX bytes (2 GiB), which is the cap on a
    // .onnx file (docs/fuzzing.md). MappedFile refuses FIFOs and devices without blocking.
    auto file = MappedFile::open(model_path_);
    if (file->size() > size_t(INT_MAX)) bad_input("{} bytes is above protobuf's 2 GB limit", file->size());
    onnx::ModelProto model;
    if (!model.ParseFromArray(file->data(), int(file->size())))
      bad_input("not an ONNX model (protobuf parse failed)");
    file.reset();
    if (!model.has_graph()) bad_input("the model has no graph");

    bool have_default = false;
    for (const auto& op : model.opset_import()) {
      if (op.domain().empty() || op.domain() == "ai.onnx") {
        have_default = true;
        if (op.version() < kMinOpset)
          unsupported("ai.onnx opset {}; hfx reads opset {} and later", op.version(), kMinOpset);
      }
    }
    if (!have_default) bad_input("the model imports no ai.onnx opset");

    const onnx::GraphProto& gp = model.graph();
    ir::Graph graph(gp.name());

    std::set<std::string> initializer_names;
    for (const auto& t : gp.initializer()) initializer_names.insert(t.name());

    for (const auto& in : gp.input()) {
      if (initializer_names.count(in.name())) continue;  // an initializer listed as an input
      with_context("input " + in.name(), [&] {
        check_new_name(graph, in.name());
        auto [dtype, shape] = value_type(in);
        graph.add_input(in.name(), dtype, std::move(shape));
      });
    }

    for (const auto& t : gp.initializer()) {
      with_context("initializer " + t.name(), [&] {
        check_new_name(graph, t.name());
        graph.add_weight(t.name(), read_initializer(t));
      });
    }

    Raisings raisings;  // ONNX op type -> IR op and its lowering
    for (const auto& [ir_op, lowering] : onnx_lowering_table())
      raisings[lowering.domain.empty() ? lowering.onnx_op : lowering.domain + "::" + lowering.onnx_op] = {ir_op, &lowering};

    for (int i = 0; i < gp.node_size(); ++i) {
      const onnx::NodeProto& p = gp.node(i);
      const std::string name = p.name().empty() ? fmt::format("/{}_{}", p.op_type(), i) : p.name();
      with_context("node " + name, [&] { read_node(graph, p, name, raisings); });
    }

    for (const auto& out : gp.output()) {
      auto id = graph.find(out.name());
      if (!id) bad_input("graph output {} is not defined", out.name());
      if (out.type().has_tensor_type() && out.type().tensor_type().elem_type() != 0) {
        DType declared = read_dtype(out.type().tensor_type().elem_type(), "graph output " + out.name());
        if (declared != graph.value(*id).dtype)
          bad_input("graph output {} is declared {} but computes {}", out.name(), dtype_name(declared),
                    dtype_name(graph.value(*id).dtype));
        // The declared shape is the contract (symbol names included); inference may know less.
        if (out.type().tensor_type().has_shape()) graph.value(*id).shape = value_type(out).second;
      }
      graph.add_output(*id);
    }
    return graph;
  }

 private:
  static void check_new_name(const ir::Graph& graph, const std::string& name) {
    if (name.empty()) bad_input("a value has an empty name");
    if (graph.find(name)) bad_input("value {} is defined twice", name);
  }

  static std::pair<DType, Shape> value_type(const onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type()) unsupported("{} is not a tensor", v.name());
    const auto& tt = v.type().tensor_type();
    DType dtype = read_dtype(tt.elem_type(), v.name());
    if (!tt.has_shape()) unsupported("{} has no shape (unknown rank)", v.name());
    Shape shape;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value()) {
        if (d.dim_value() < 0) bad_input("{} has a negative dim {}", v.name(), d.dim_value());
        shape.push_back(Dim::fixed(d.dim_value()));
      } else if (d.has_dim_param() && !d.dim_param().empty()) {
        shape.push_back(Dim::sym(d.dim_param()));
      } else {
        shape.push_back(Dim::unknown());
      }
    }
    return {dtype, std::move(shape)};
  }

  ir::WeightRef read_initializer(const onnx::TensorProto& t) {
    DType dtype = read_dtype(t.data_type(), "the tensor");
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    const size_t nbytes = checked_nbytes(dims, dtype, "the tensor");
    if (t.has_segment()) unsupported("segmented tensors");
    if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL)
      return read_external(t, dtype, std::move(dims), nbytes);

    // Check the stored size before allocating: the dims alone may claim terabytes.
    if (t.has_raw_data() && t.raw_data().size() != nbytes)
      bad_input("raw_data has {} bytes; {} {} needs {}", t.raw_data().size(), dtype_name(dtype),
                shape_str(fixed_shape(dims)), nbytes);
    const size_t want = size_t(numel_of(dims));
    // Typed fields hold one value per element (int32_data packs two 4-bit values per entry: not read).
    const size_t stored = t.has_raw_data() ? want
                                           : size_t(std::max({t.float_data_size(), t.double_data_size(),
                                                              t.int64_data_size(), t.int32_data_size()}));
    if (!t.has_raw_data() && dtype_bits(dtype) == 4)
      unsupported("a {} tensor stored in int32_data (hfx reads packed 4-bit tensors from raw_data)", dtype_name(dtype));
    if (want != stored)
      bad_input("the tensor stores {} values for {} {}", stored, dtype_name(dtype), shape_str(fixed_shape(dims)));
    Tensor value(dtype, dims);
    HFX_CHECK(value.nbytes() == nbytes, "tensor bytes {} vs {}", value.nbytes(), nbytes);
    const auto numel = size_t(value.numel());
    if (t.has_raw_data()) {
      if (nbytes) std::memcpy(value.data(), t.raw_data().data(), nbytes);
      return ir::WeightRef::constant(std::move(value));
    }
    switch (dtype) {
      case DType::F32: copy_field<float>(t.float_data(), numel, value, "float_data"); break;
      case DType::F64: copy_field<double>(t.double_data(), numel, value, "double_data"); break;
      case DType::I64: copy_field<int64_t>(t.int64_data(), numel, value, "int64_data"); break;
      case DType::I32: copy_field<int32_t>(t.int32_data(), numel, value, "int32_data"); break;
      case DType::I16: copy_field<int16_t>(t.int32_data(), numel, value, "int32_data"); break;
      case DType::I8: copy_field<int8_t>(t.int32_data(), numel, value, "int32_data"); break;
      case DType::U8: case DType::Bool: copy_field<uint8_t>(t.int32_data(), numel, value, "int32_data"); break;
      case DType::F16: case DType::BF16: copy_field<uint16_t>(t.int32_data(), numel, value, "int32_data"); break;
      case DType::I4: case DType::U4: break;  // refused above
    }
    return ir::WeightRef::constant(std::move(value));
  }

  ir::WeightRef read_external(const onnx::TensorProto& t, DType dtype, std::vector<int64_t> dims, size_t nbytes) {
    std::string location;
    uint64_t offset = 0;
    std::optional<uint64_t> length;
    for (const auto& e : t.external_data()) {
      if (e.key() == "location")
        location = e.value();
      else if (e.key() == "offset")
        offset = parse_u64(e.value(), "external data offset");
      else if (e.key() == "length")
        length = parse_u64(e.value(), "external data length");
    }
    const fs::path loc(location);
    if (location.empty()) bad_input("external data has no location");
    if (loc.is_absolute() || loc.has_root_name() || loc.has_root_directory())
      bad_input("external data location `{}` is not a relative path", location);
    for (const auto& part : loc)
      if (part == "..") bad_input("external data location `{}` leaves the model's folder", location);
    if (length && *length != nbytes)
      bad_input("external data length {} but {} {} needs {} bytes", *length, dtype_name(dtype),
                shape_str(fixed_shape(dims)), nbytes);

    auto& file = files_[location];
    if (!file) {
      // The lexical checks above do not see symlinks: `model.onnx_data -> /elsewhere`, or a location
      // `sub/w.bin` under a linked folder `sub`, must not read weights from outside the .onnx file's
      // folder (the export shipped by someone else). Regular files only: a FIFO would block.
      // (A missing file stays an i/o error from the open below.)
      const fs::path data = base_dir_ / loc;
      std::error_code ec;
      if (fs::exists(fs::symlink_status(data, ec)))
        check_file_inside(base_dir_.empty() ? fs::path(".") : base_dir_, data, "external data file");
      file = MappedFile::open(data);
    }
    if (offset > file->size() || nbytes > file->size() - offset)
      bad_input("external data [{}, {}) is outside {} ({} bytes)", offset, offset + nbytes, location,
                file->size());
    return ir::WeightRef::source(file, t.name(), dtype, std::move(dims), size_t(offset));
  }

  // A Concat whose inputs are all external tensors of one dtype and of the same shape but along `axis`
  // (shape inference lets other dims differ where a file says so; a stack of weights must not).
  static bool is_weight_stack(const ir::Graph& graph, const ir::Node& node) {
    if (node.inputs.empty() || node.inputs[0] == ir::kNone) return false;
    const ir::WeightRef* first = graph.weight(node.inputs[0]);
    if (!first || first->shape().empty()) return false;
    const auto rank = int64_t(first->shape().size());
    int64_t axis = node.attr_int("axis", 0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return false;
    for (ir::ValueId in : node.inputs) {
      const ir::WeightRef* w = in == ir::kNone ? nullptr : graph.weight(in);
      if (!w || w->is_constant() || w->dtype() != first->dtype() || int64_t(w->shape().size()) != rank) return false;
      for (int64_t d = 0; d < rank; ++d)
        if (d != axis && w->shape()[size_t(d)] != first->shape()[size_t(d)]) return false;
    }
    return true;
  }

  static void read_node(ir::Graph& graph, const onnx::NodeProto& p, const std::string& name,
                        const Raisings& raisings) {
    const bool default_domain = p.domain().empty() || p.domain() == "ai.onnx";
    auto it = raisings.find(default_domain ? p.op_type() : p.domain() + "::" + p.op_type());
    if (it == raisings.end() && !default_domain)
      unsupported("onnx: op {}::{} (node {}) is not supported", p.domain(), p.op_type(), name);
    if (it == raisings.end()) unsupported("onnx: op {} (node {}) is not supported", p.op_type(), name);

    ir::Node node;
    node.op = it->second.first;
    node.name = name;
    for (const auto& in : p.input()) {
      if (in.empty()) {
        node.inputs.push_back(ir::kNone);
        continue;
      }
      auto id = graph.find(in);
      if (!id) bad_input("input {} is not defined before the node", in);
      node.inputs.push_back(*id);
    }
    node.attrs = it->second.second->raise(p);

    std::vector<ir::Value> outs;
    try {
      outs = ir::infer_outputs(graph, node);
    } catch (const Error& e) {
      // Inference checks that are invariants for graphs hfx builds are the file's fault here.
      if (e.kind() != ErrorKind::Internal) throw;
      bad_input("{} does not type-check: {}", node.op, e.message());
    }
    // Output names by the IR's order (ORT ops may leave optional slots empty, see output_slots).
    const auto& slots = it->second.second->output_slots;
    std::vector<std::string> out_names;
    for (int i = 0; i < p.output_size(); ++i) {
      const bool used = slots.empty() || std::find(slots.begin(), slots.end(), i) != slots.end();
      if (used) out_names.push_back(p.output(i));
      else if (!p.output(i).empty()) bad_input("{} output {} is not supported", node.op, i);
    }
    if (outs.size() != out_names.size())
      bad_input("{} outputs; {} has {}", out_names.size(), node.op, outs.size());
    std::set<std::string> seen;
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::string& out = out_names[i];
      check_new_name(graph, out);
      if (!seen.insert(out).second) bad_input("value {} is defined twice", out);
      outs[i].name = out;
    }
    // A Concat of checkpoint tensors (a mirrored export's packed q|k|v, checkpoint_mirror.h) is one
    // weight, as a runtime's constant folding makes it, so kernels read it as the export's graph did.
    if (node.op == "Concat" && outs.size() == 1 && is_weight_stack(graph, node)) {
      std::vector<ir::WeightRef> parts;
      for (ir::ValueId in : node.inputs) parts.push_back(*graph.weight(in));
      graph.add_weight(outs[0].name, ir::WeightRef::concat(std::move(parts), node.attr_int("axis")));
      return;
    }
    graph.add_node(std::move(node), outs);
  }

  fs::path model_path_;
  fs::path base_dir_;
  std::map<std::string, std::shared_ptr<const MappedFile>> files_;  // one mapping per data file
};

}  // namespace

ir::Graph read_onnx(const fs::path& model_path) {
  return with_context("onnx: reading " + model_path.string(), [&] { return Reader(model_path).read(); });
}

}  // namespace hfx::onnx_backend
