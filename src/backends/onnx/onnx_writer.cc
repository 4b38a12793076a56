#include "backends/onnx/onnx_writer.h"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/onnx_pb.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "backends/onnx/checkpoint_mirror.h"
#include "core/error.h"
#include "core/files.h"
#include "core/pipelined_file.h"
#include "core/sha256.h"
#include "core/tensor.h"
#include "backends/onnx/onnx_scan.h"
#include "ir/weight_scan.h"
#include "ir/weight_stream.h"

namespace fs = std::filesystem;

namespace hfx::onnx_backend {

namespace {

constexpr int64_t kIrVersion = 10;
constexpr int64_t kIrVersionOpset23 = 11;  // onnx's checker: ai.onnx opset 23 needs IR version 11
constexpr size_t kInlineLimit = 1024;  // weights up to this many bytes go inline

// --- dtypes -----------------------------------------------------------------------------------

struct DTypePair {
  DType hfx;
  onnx::TensorProto_DataType onnx;
};
constexpr DTypePair kDTypes[] = {
    {DType::F32, onnx::TensorProto_DataType_FLOAT},   {DType::F16, onnx::TensorProto_DataType_FLOAT16},
    {DType::BF16, onnx::TensorProto_DataType_BFLOAT16}, {DType::F64, onnx::TensorProto_DataType_DOUBLE},
    {DType::I64, onnx::TensorProto_DataType_INT64},   {DType::I32, onnx::TensorProto_DataType_INT32},
    {DType::I16, onnx::TensorProto_DataType_INT16},   {DType::I8, onnx::TensorProto_DataType_INT8},
    {DType::U8, onnx::TensorProto_DataType_UINT8},    {DType::Bool, onnx::TensorProto_DataType_BOOL},
    // INT4 = 22, UINT4 = 21 (onnx.proto since IR 10; the system's onnx headers predate them): packed
    // two per byte, element 2i in the low nibble (the ONNX spec's raw_data layout).
    {DType::I4, onnx::TensorProto_DataType(22)},      {DType::U4, onnx::TensorProto_DataType(21)},
};

// --- attributes -------------------------------------------------------------------------------

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

void set_attr(onnx::NodeProto& proto, const std::string& key, const ir::Attr& value) {
  onnx::AttributeProto* a = proto.add_attribute();
  a->set_name(key);
  std::visit(Overloaded{
                 [&](int64_t v) {
                   a->set_type(onnx::AttributeProto_AttributeType_INT);
                   a->set_i(v);
                 },
                 [&](double v) {
                   a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
                   a->set_f(float(v));
                 },
                 [&](const std::string& v) {
                   a->set_type(onnx::AttributeProto_AttributeType_STRING);
                   a->set_s(v);
                 },
                 [&](const std::vector<int64_t>& v) {
                   a->set_type(onnx::AttributeProto_AttributeType_INTS);
                   for (auto x : v) a->add_ints(x);
                 },
                 [&](const std::vector<double>& v) {
                   a->set_type(onnx::AttributeProto_AttributeType_FLOATS);
                   for (auto x : v) a->add_floats(float(x));
                 },
             },
             value);
}

ir::Attr attr_from_proto(const onnx::AttributeProto& a) {
  switch (a.type()) {
    case onnx::AttributeProto_AttributeType_INT: return int64_t(a.i());
    case onnx::AttributeProto_AttributeType_FLOAT: return double(a.f());
    case onnx::AttributeProto_AttributeType_STRING: return a.s();
    case onnx::AttributeProto_AttributeType_INTS: return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    case onnx::AttributeProto_AttributeType_FLOATS: {
      std::vector<double> v;
      for (float f : a.floats()) v.push_back(double(f));
      return v;
    }
    default:
      unsupported("attribute `{}` has ONNX type {}, which hfx does not read", a.name(),
                  onnx::AttributeProto_AttributeType_Name(a.type()));
  }
}

// Every attribute as is (the IR uses ONNX attribute names and semantics). std::map order keeps the
// output deterministic.
void lower_passthrough(const ir::Node& node, onnx::NodeProto& proto) {
  for (const auto& [key, value] : node.attrs) set_attr(proto, key, value);
}

ir::Attrs raise_passthrough(const onnx::NodeProto& proto) {
  ir::Attrs attrs;
  for (const auto& a : proto.attribute()) {
    if (attrs.count(a.name())) bad_input("attribute `{}` appears twice", a.name());
    attrs[a.name()] = attr_from_proto(a);
  }
  return attrs;
}

// Cast: the IR's `to` is an hfx dtype name; ONNX's is a TensorProto.DataType.
void lower_cast(const ir::Node& node, onnx::NodeProto& proto) {
  for (const auto& [key, value] : node.attrs) {
    if (key != "to") {
      set_attr(proto, key, value);
      continue;
    }
    const auto* name = std::get_if<std::string>(&value);
    HFX_CHECK(name, "Cast node {}: `to` is not a dtype name", node.name);
    auto dtype = dtype_from_name(*name);
    HFX_CHECK(dtype, "Cast node {}: `to` = {} is not an hfx dtype", node.name, *name);
    set_attr(proto, "to", int64_t(onnx_elem_type(*dtype)));
  }
  HFX_CHECK(node.has_attr("to"), "Cast node {} has no `to`", node.name);
}

ir::Attrs raise_cast(const onnx::NodeProto& proto) {
  ir::Attrs attrs = raise_passthrough(proto);
  auto it = attrs.find("to");
  if (it == attrs.end() || !std::holds_alternative<int64_t>(it->second))
    bad_input("Cast without an integer `to` attribute");
  auto elem = std::get<int64_t>(it->second);
  auto dtype = dtype_from_onnx(int32_t(elem));
  if (!dtype || elem != int64_t(int32_t(elem))) unsupported("Cast to ONNX element type {}", elem);
  it->second = std::string(dtype_name(*dtype));
  return attrs;
}

// The IR's FusedMatMul is x @ W^T, ORT's FusedMatMul with transB=1; a file's FusedMatMul is read only in
// that form (alpha 1, no other transposition).
void lower_fused_matmul(const ir::Node& node, onnx::NodeProto& proto) {
  HFX_CHECK(node.attrs.empty(), "FusedMatMul node {}: attributes", node.name);
  set_attr(proto, "transB", int64_t(1));
}

ir::Attrs raise_fused_matmul(const onnx::NodeProto& proto) {
  if (proto.input_size() != 2) bad_input("FusedMatMul with {} inputs (expected 2)", proto.input_size());
  bool trans_b = false;
  for (const auto& [name, value] : raise_passthrough(proto)) {
    const auto* i = std::get_if<int64_t>(&value);
    const auto* f = std::get_if<double>(&value);
    const bool as_linear = (name == "transB" && i && *i == 1) || (name == "alpha" && f && *f == 1.0) ||
                           ((name == "transA" || name == "transBatchA" || name == "transBatchB") && i && *i == 0);
    if (!as_linear)
      unsupported("FusedMatMul attribute `{}` of this value (hfx reads FusedMatMul(transB=1, alpha=1): a Linear layer's product)", name);
    trans_b = trans_b || name == "transB";
  }
  if (!trans_b) unsupported("FusedMatMul without transB=1 (hfx reads FusedMatMul(transB=1, alpha=1): a Linear layer's product)");
  return {};
}

// --- model building ---------------------------------------------------------------------------

void set_type(onnx::ValueInfoProto& info, const ir::Value& v) {
  info.set_name(v.name);
  auto* tensor = info.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx_elem_type(v.dtype));
  auto* shape = tensor->mutable_shape();
  for (const Dim& d : v.shape) {
    auto* dim = shape->add_dim();
    if (d.is_fixed())
      dim->set_dim_value(d.value);
    else if (d.is_symbol())
      dim->set_dim_param(d.symbol);
    // else: neither set, which ONNX reads as an unknown dim
  }
}

void check_plain_file_name(const std::string& what, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos)
    bad_input("onnx: {} `{}` must be a plain file name", what, name);
}

// A binary output file with a large buffer; every failure is an Io error naming the path.
class OutFile {
 public:
  explicit OutFile(fs::path path) : path_(std::move(path)), buffer_(kBufferSize) {
    file_ = std::fopen(path_.c_str(), "wb");
    if (!file_) fail(ErrorKind::Io, "{}: cannot create: {}", path_.string(), std::strerror(errno));
    std::setvbuf(file_, buffer_.data(), _IOFBF, buffer_.size());
  }
  ~OutFile() {
    if (file_) std::fclose(file_);
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;

  void write(const void* data, size_t size) {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
      const size_t chunk = std::min<size_t>(size, size_t(1) << 28);
      if (std::fwrite(p, 1, chunk, file_) != chunk)
        fail(ErrorKind::Io, "{}: write failed: {}", path_.string(), std::strerror(errno));
      p += chunk;
      size -= chunk;
      written_ += chunk;
    }
  }
  void pad_to(size_t offset) {
    static const char zeros[4096] = {};
    HFX_CHECK(offset >= written_, "pad_to({}) below {}", offset, written_);
    while (written_ < offset) write(zeros, std::min(sizeof(zeros), offset - written_));
  }
  size_t written() const { return written_; }
  void close() {
    std::FILE* f = file_;
    file_ = nullptr;
    if (std::fclose(f) != 0)
      fail(ErrorKind::Io, "{}: write failed: {}", path_.string(), std::strerror(errno));
  }

 private:
  static constexpr size_t kBufferSize = size_t(8) << 20;
  fs::path path_;
  std::vector<char> buffer_;
  std::FILE* file_ = nullptr;
  size_t written_ = 0;
};

// One weight into the external data file, hashed and queued while the writer thread writes the
// previous blocks; its bytes are scanned for NaN / Inf on the way (`non_finite`). Returns true when
// the queued bytes are a constant's own (ir::stream_weight): no source pages to release.
bool write_external(const ir::WeightRef& w, PipelinedFile& out, ir::NonFiniteCount& non_finite) {
  return ir::stream_weight(w, out, onnx_block_rows, [&](std::span<const uint8_t> bytes, int64_t first) {
    ir::count_non_finite(bytes, w.dtype(), first, non_finite);
  });
}

void add_external_entry(onnx::TensorProto& t, const std::string& key, const std::string& value) {
  auto* e = t.add_external_data();
  e->set_key(key);
  e->set_value(value);
}

// `name` under the scope `prefix` ("" leaves it as it is).
std::string under(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  return prefix + (name.starts_with("/") ? "" : "/") + name;
}

// Every node of `graph` into `g` through the lowering table, each name (nodes and values) under
// `prefix`. Returns whether any node is in a non-default domain.
bool write_nodes(const ir::Graph& graph, const std::string& prefix, onnx::GraphProto& g) {
  bool contrib = false;
  for (const ir::Node& node : graph.nodes()) {
    const OpLowering* lowering = find_onnx_lowering(node.op);
    if (!lowering) unsupported("onnx backend: op {} (node {}) has no lowering", node.op, node.name);
    onnx::NodeProto* p = g.add_node();
    p->set_name(under(prefix, node.name));
    p->set_op_type(lowering->onnx_op);
    if (!lowering->domain.empty()) {
      p->set_domain(lowering->domain);
      contrib = true;
    }
    size_t num_inputs = node.inputs.size();
    while (num_inputs > 0 && node.inputs[num_inputs - 1] == ir::kNone) --num_inputs;  // trailing optionals
    for (size_t i = 0; i < num_inputs; ++i)
      p->add_input(node.inputs[i] == ir::kNone ? std::string() : under(prefix, graph.value(node.inputs[i]).name));
    if (lowering->output_slots.empty()) {
      for (ir::ValueId out : node.outputs) p->add_output(under(prefix, graph.value(out).name));
    } else {
      HFX_CHECK(lowering->output_slots.size() == node.outputs.size(), "{}: output slots", node.name);
      std::vector<std::string> names(size_t(lowering->output_slots.back() + 1));
      for (size_t i = 0; i < node.outputs.size(); ++i)
        names[size_t(lowering->output_slots[i])] = under(prefix, graph.value(node.outputs[i]).name);
      for (const auto& name : names) p->add_output(name);
    }
    with_context("onnx: node " + node.name + " (" + node.op + ")", [&] { lowering->lower(node, *p); });
  }
  return contrib;
}

}  // namespace

void write_subgraph(const ir::Graph& graph, const std::string& prefix, onnx::GraphProto& g) {
  g.set_name(under(prefix, graph.name()));
  auto typed = [&](onnx::ValueInfoProto& info, ir::ValueId id) {
    set_type(info, graph.value(id));
    info.set_name(under(prefix, graph.value(id).name));
  };
  for (ir::ValueId id : graph.inputs()) typed(*g.add_input(), id);
  const bool contrib = write_nodes(graph, prefix, g);
  HFX_CHECK(!contrib, "subgraph {}: a body of standard ops only", g.name());
  for (ir::ValueId id : graph.outputs()) typed(*g.add_output(), id);
  for (ir::ValueId id : graph.weights()) {  // constants only (the step's axes and shapes), inline
    const ir::WeightRef* w = graph.weight(id);
    HFX_CHECK(w && w->is_constant(), "subgraph {}: weight {} is not a constant", g.name(), graph.value(id).name);
    const Tensor t = w->materialize();
    onnx::TensorProto* p = g.add_initializer();
    p->set_name(under(prefix, graph.value(id).name));
    p->set_data_type(onnx_elem_type(w->dtype()));
    for (int64_t d : w->shape()) p->add_dims(d);
    p->set_raw_data(t.data(), t.nbytes());
  }
}

int32_t onnx_elem_type(DType t) {
  for (const auto& p : kDTypes)
    if (p.hfx == t) return int32_t(p.onnx);
  HFX_CHECK(false, "no ONNX type for dtype {}", int(t));
  return 0;
}

std::optional<DType> dtype_from_onnx(int32_t elem_type) {
  for (const auto& p : kDTypes)
    if (int32_t(p.onnx) == elem_type) return p.hfx;
  return std::nullopt;
}

const std::map<std::string, OpLowering>& onnx_lowering_table() {
  static const std::map<std::string, OpLowering> table = [] {
    std::map<std::string, OpLowering> t;
    // Primitives with ONNX's own name, attributes and semantics (see ir/ops.h).
    for (const char* op :
         {"Add",      "Sub",       "Mul",       "Div",        "Pow",       "Equal",     "Less",
          "LessOrEqual", "Greater", "GreaterOrEqual", "And",    "Or",        "Neg",       "Sqrt",
          "Reciprocal", "Exp",     "Log",       "Sin",        "Cos",       "Tanh",      "Erf",
          "Sigmoid",  "Not",       "Identity",  "MatMul",     "Gather",    "Softmax",   "ReduceMean",
          "ReduceMax", "ReduceSum", "Transpose", "Reshape",   "Unsqueeze", "Squeeze",   "Concat",
          "Slice",    "Expand",    "Where",     "Range",      "Shape",     "CumSum",    "ScatterElements",
          "DequantizeLinear", "Mod",    "GatherElements"})
      t[op] = OpLowering{op, lower_passthrough, raise_passthrough};
    // Special cases.
    t["Cast"] = OpLowering{"Cast", lower_cast, raise_cast};
    // Weight-only quantized MatMul (quant/quantize.h), ONNX Runtime's contrib op.
    {
      OpLowering l;
      l.onnx_op = "MatMulNBits";
      l.domain = "com.microsoft";
      l.lower = lower_passthrough;
      l.raise = raise_passthrough;
      t["MatMulNBits"] = l;
      l.onnx_op = "GatherBlockQuantized";  // a quantized embedding table (shared with a tied lm_head)
      t["GatherBlockQuantized"] = l;
    }
    // A Linear layer over its stored [N, K] weight (the `ort` profile's ort-fused-matmul pass).
    t["FusedMatMul"] = OpLowering{"FusedMatMul", lower_fused_matmul, raise_fused_matmul, "com.microsoft"};
    // ONNX Runtime's fused ops (the `ort` profile): SimplifiedLayerNormalization is registered in
    // ORT's ai.onnx domain, the others in com.microsoft.
    t["SimplifiedLayerNormalization"] = OpLowering{"SimplifiedLayerNormalization", lower_passthrough, raise_passthrough};
    t["SkipSimplifiedLayerNormalization"] =
        OpLowering{"SkipSimplifiedLayerNormalization", lower_passthrough, raise_passthrough, "com.microsoft", {0, 3}};
    t["GroupQueryAttention"] = OpLowering{"GroupQueryAttention", lower_passthrough, raise_passthrough, "com.microsoft"};
    // A hybrid's state ops (passes/ort_state_ops.cc).
    t["CausalConvWithState"] = OpLowering{"CausalConvWithState", lower_passthrough, raise_passthrough, "com.microsoft"};
    t["LinearAttention"] = OpLowering{"LinearAttention", lower_passthrough, raise_passthrough, "com.microsoft"};
    // --onnx-recurrence scan: an ONNX Scan over time whose body is one recurrent step (onnx_scan.h).
    t["RecurrenceScan"] = OpLowering{"Scan", lower_recurrence_scan, raise_recurrence_scan};
    // ONNX opset-23 fused ops (--onnx-opset 23); two keep IR names apart from the composites they replace.
    t["RMSNormalization"] = OpLowering{"RMSNormalization", lower_passthrough, raise_passthrough};
    t["OnnxRotaryEmbedding"] = OpLowering{"RotaryEmbedding", lower_passthrough, raise_passthrough};
    t["OnnxAttention"] = OpLowering{"Attention", lower_passthrough, raise_passthrough};
    // Standard fused ops of earlier opsets, written at every opset (17: LayerNormalization, 20: Gelu).
    t["LayerNormalization"] = OpLowering{"LayerNormalization", lower_passthrough, raise_passthrough};
    t["OnnxGelu"] = OpLowering{"Gelu", lower_passthrough, raise_passthrough};
    return t;
  }();
  return table;
}

const OpLowering* find_onnx_lowering(const std::string& ir_op) {
  const auto& table = onnx_lowering_table();
  auto it = table.find(ir_op);
  return it == table.end() ? nullptr : &it->second;
}

OnnxWriteResult write_onnx(const ir::Graph& graph, const fs::path& out_dir, const OnnxWriteOptions& opts) {
  check_plain_file_name("model file", opts.model_file);
  check_plain_file_name("data file", opts.data_file);
  if (opts.model_file == opts.data_file) bad_input("onnx: model and data file are both `{}`", opts.model_file);
  if (opts.alignment == 0) bad_input("onnx: alignment must be at least 1");
  {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) fail(ErrorKind::Io, "{}: cannot create: {}", out_dir.string(), ec.message());
  }

  OnnxWriteResult result;
  result.model_path = out_dir / opts.model_file;

  onnx::ModelProto model;
  model.set_ir_version(opts.opset >= 23 ? kIrVersionOpset23 : kIrVersion);
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(opts.opset);
  model.set_producer_name(opts.producer);
  model.set_producer_version(HFX_VERSION);
  for (const auto& [key, value] : opts.metadata) {  // std::map: sorted by key
    auto* p = model.add_metadata_props();
    p->set_key(key);
    p->set_value(value);
  }

  onnx::GraphProto* g = model.mutable_graph();
  g->set_name(graph.name());
  for (ir::ValueId id : graph.inputs()) set_type(*g->add_input(), graph.value(id));

  // The data file is a copy of the checkpoint's file when the weights are its tensors as stored
  // (checkpoint_mirror.h); the first graph of a folder only (a later one shares its files).
  // A later graph's stacked weights whose parts that copy holds are read from it the same way.
  std::optional<CheckpointMirror> mirror;
  if (opts.mirror_checkpoint && !(opts.written && opts.written->size() > 0)) mirror = plan_checkpoint_mirror(graph);
  const CheckpointMirror shared = !mirror && opts.written && opts.share_data_files
                                      ? plan_shared_stacks(graph, *opts.written, out_dir)
                                      : CheckpointMirror{};
  // Each stacked weight is a Concat of its parts, which ONNX Runtime folds when it loads the graph.
  for (const CheckpointMirror* stacks : {mirror ? &*std::as_const(mirror) : nullptr, &shared}) {
    if (!stacks) continue;
    for (const auto& [id, parts] : stacks->stacked) {
      onnx::NodeProto* p = g->add_node();
      p->set_name("/hfx/stacked/" + graph.value(id).name);
      p->set_op_type("Concat");
      for (size_t i : parts) p->add_input(stacks->parts[i].name);
      p->add_output(graph.value(id).name);
      set_attr(*p, "axis", int64_t(0));
    }
  }

  // Nodes first: an op without a lowering fails before gigabytes of weights are written.
  const bool contrib = write_nodes(graph, "", *g);

  for (ir::ValueId id : graph.outputs()) set_type(*g->add_output(), graph.value(id));
  if (contrib) {
    auto* ms = model.add_opset_import();
    ms->set_domain("com.microsoft");
    ms->set_version(1);
  }

  // Initializers: small ones and constants inline, the rest streamed into one data file (or, mirrored,
  // pointing into the checkpoint file's copy, made in the kernel while the weights are scanned here).
  std::unique_ptr<PipelinedFile> data;
  std::future<void> copying;
  std::vector<bool> part_scanned;
  // An initializer `name` whose bytes, `w`'s, lie at `offset` in the folder's file `location`.
  auto external_initializer = [&](const std::string& name, const ir::WeightRef& w, const std::string& location,
                                  size_t offset) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx_elem_type(w.dtype()));
    for (int64_t d : w.shape()) t->add_dims(d);
    t->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
    add_external_entry(*t, "location", location);
    add_external_entry(*t, "offset", std::to_string(offset));
    add_external_entry(*t, "length", std::to_string(w.nbytes()));
    ++result.num_weights;
  };
  auto mirrored_initializer = [&](const std::string& name, const ir::WeightRef& w, CheckpointMirror::At at) {
    const std::string file = mirror_file_name(opts.data_file, at.file);
    external_initializer(name, w, file, at.offset);
    if (opts.written) opts.written->add(w, out_dir / file, at.offset);
  };
  auto scan_stored = [&](const ir::WeightRef& w) {  // NaN / Inf in a mirrored tensor, then its pages go
    ir::NonFiniteCount count;
    ir::count_non_finite(*w.raw_bytes(), w.dtype(), 0, count);
    w.release_source_pages();
    if (count.total()) result.non_finite.push_back(ir::describe_non_finite(w, count));
  };
  if (mirror) {
    for (size_t i = 0; i < mirror->files.size(); ++i) {
      check_plain_file_name("data file", mirror_file_name(opts.data_file, i));
      result.data_copies.push_back({out_dir / mirror_file_name(opts.data_file, i), mirror->files[i]->path(), 0});
    }
    result.data_path = result.data_copies.front().file;
    result.source_bytes_read = int64_t(mirror->tensor_bytes);  // the weights' bytes (the copy reads the header too)
    part_scanned.assign(mirror->parts.size(), false);
    copying = std::async(std::launch::async, [copies = result.data_copies] {
      for (const auto& c : copies) copy_file_contents(c.copy_of, c.file);
    });
  }
  for (ir::ValueId id : graph.weights()) {
    const ir::Value& value = graph.value(id);
    const ir::WeightRef* w = graph.weight(id);
    HFX_CHECK(w, "weight value {} has no WeightRef", value.name);
    if (shared.stacked.count(id)) {  // a Concat over an earlier graph's file: nothing read or written
      result.shared_bytes += int64_t(w->nbytes());
      if (opts.on_weight_written) opts.on_weight_written(1, int64_t(w->nbytes()));
      continue;
    }
    if (mirror && (mirror->stored.count(id) || mirror->stacked.count(id))) {
      with_context("onnx: writing weight " + value.name, [&] {
        if (auto at = mirror->stored.find(id); at != mirror->stored.end()) {
          mirrored_initializer(value.name, *w, at->second);
          scan_stored(*w);
        } else {  // the Concat node's output; its parts' initializers follow the graph's weights
          for (size_t i : mirror->stacked.at(id))
            if (!part_scanned[i]) {
              scan_stored(mirror->parts[i].weight);
              part_scanned[i] = true;
            }
        }
      });
      if (opts.on_weight_written) opts.on_weight_written(1, int64_t(w->nbytes()));
      continue;
    }
    bool release_later = false;  // the writer thread releases the source pages it writes from
    bool reused = false;         // the bytes came from an earlier graph's file, not the checkpoint
    ir::NonFiniteCount non_finite;  // (bytes reused from an earlier graph were scanned there)
    with_context("onnx: writing weight " + value.name, [&] {
      onnx::TensorProto* t = g->add_initializer();
      t->set_name(value.name);
      t->set_data_type(onnx_elem_type(w->dtype()));
      for (int64_t d : w->shape()) t->add_dims(d);
      const size_t nbytes = w->nbytes();
      const bool inline_data = w->is_constant() || nbytes <= (mirror ? kMirrorInlineLimit : kInlineLimit);
      // Already in a data file of this folder (prefill.onnx_data, when decode.onnx is written): the
      // graph reads it there, and its bytes are neither read nor written again.
      if (auto shared = !inline_data && opts.written && opts.share_data_files ? opts.written->whole_in(*w, out_dir)
                                                                              : std::nullopt) {
        reused = true;
        t->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
        add_external_entry(*t, "location", shared->file.filename().string());
        add_external_entry(*t, "offset", std::to_string(shared->offset));
        add_external_entry(*t, "length", std::to_string(nbytes));
        result.shared_bytes += int64_t(nbytes);
        return;
      }
      HFX_CHECK(inline_data || !mirror, "weight {}: neither inline nor in the mirrored checkpoint", value.name);
      if (!inline_data && !data) {
        result.data_path = out_dir / opts.data_file;
        data = std::make_unique<PipelinedFile>(result.data_path, kOnnxInFlightBytes);
      }
      size_t offset = 0;
      if (!inline_data) {
        offset = (data->size() + opts.alignment - 1) / opts.alignment * opts.alignment;
        data->pad_to(offset);
      }
      if (inline_data) {
        auto earlier = opts.written && !w->is_constant() ? opts.written->bytes(*w) : std::nullopt;
        reused = earlier.has_value();
        auto raw = earlier ? std::optional(earlier->bytes) : w->raw_bytes();
        const Tensor tensor = raw ? Tensor() : w->materialize();
        const std::span<const uint8_t> bytes = raw ? *raw : std::span<const uint8_t>(tensor.data(), tensor.nbytes());
        HFX_CHECK(bytes.size() == nbytes, "{} bytes for a tensor of {}", bytes.size(), nbytes);
        t->set_raw_data(bytes.data(), bytes.size());
        if (!reused) ir::count_non_finite(bytes, w->dtype(), 0, non_finite);
        if (opts.written) opts.written->add_inline(*w, bytes);
      } else if (auto earlier = opts.written ? opts.written->bytes(*w) : std::nullopt) {
        // Written by an earlier graph of this export, but not whole in this folder's files (a part of
        // a packed weight, a transposed twin): copied from that file, whose pages leave our resident
        // set once written, not read from the checkpoint again.
        reused = true;
        const size_t at = earlier->map ? size_t(earlier->bytes.data() - earlier->map->data()) : 0;
        data->write(earlier->bytes, [e = *earlier, at] {
          if (e.map) e.map->release(at, e.bytes.size());
        });
      } else {
        release_later = write_external(*w, *data, non_finite);
      }
      if (!inline_data) {
        t->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
        add_external_entry(*t, "location", opts.data_file);
        add_external_entry(*t, "offset", std::to_string(offset));
        add_external_entry(*t, "length", std::to_string(nbytes));
        if (opts.written) opts.written->add(*w, result.data_path, offset);
      }
    });
    if (!reused) result.source_bytes_read += int64_t(w->source_bytes());
    if (non_finite.total()) result.non_finite.push_back(ir::describe_non_finite(*w, non_finite));
    if (!release_later) w->release_source_pages();
    ++result.num_weights;
    if (opts.on_weight_written) opts.on_weight_written(1, int64_t(w->nbytes()));
  }
  for (const auto& part : shared.parts)
    external_initializer(part.name, part.weight, part.earlier_file.filename().string(), part.at.offset);
  if (mirror) {
    for (const auto& part : mirror->parts) mirrored_initializer(part.name, part.weight, part.at);
    copying.get();  // rethrows the copy's Io error
    for (size_t i = 0; i < mirror->files.size(); ++i) {
      auto& copy = result.data_copies[i];
      std::error_code ec;
      copy.size = fs::file_size(copy.file, ec);
      if (ec || copy.size != mirror->files[i]->size())
        fail(ErrorKind::Io, "{}: the copy of {} has {} bytes, not {} (the checkpoint changed while it was exported?)",
             copy.file.string(), copy.copy_of.string(), ec ? 0 : copy.size, mirror->files[i]->size());
      result.data_bytes += int64_t(copy.size);
      if (opts.written) opts.written->close(copy.file);
    }
  }
  if (data) {
    result.data_bytes = int64_t(data->size());
    result.data_sha256 = data->finish();
    if (opts.written) opts.written->close(result.data_path);
  }

  // Deterministic serialization (map fields and unknown fields in a fixed order).
  const size_t size = model.ByteSizeLong();
  if (size > size_t(INT_MAX))
    unsupported("onnx: the model proto would be {} bytes, above protobuf's 2 GB limit", size);
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    model.SerializeWithCachedSizes(&coded);
    HFX_CHECK(!coded.HadError(), "serializing the ONNX model failed");
  }
  OutFile out(result.model_path);
  out.write(bytes.data(), bytes.size());
  out.close();
  Sha256 sha;
  sha.update({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  result.model_sha256 = sha.hex_digest();
  return result;
}

}  // namespace hfx::onnx_backend
