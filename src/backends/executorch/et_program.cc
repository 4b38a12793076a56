#include "backends/executorch/et_program.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "backends/executorch/et_ops.h"
#include "backends/executorch/et_xnnpack.h"
#include "backends/executorch/et_xnnpack_partition.h"
#include "core/error.h"

namespace hfx::executorch_backend {

using nlohmann::json;
using pt2_backend::SymExpr;
using Kind = EtValue::Kind;

int et_scalar_type(DType t) {
  switch (t) {
    case DType::U8: return 0;
    case DType::I8: return 1;
    case DType::I16: return 2;
    case DType::I32: return 3;
    case DType::I64: return 4;
    case DType::F16: return 5;
    case DType::F32: return 6;
    case DType::F64: return 7;
    case DType::Bool: return 11;
    case DType::BF16: return 15;
    default: unsupported("executorch: no ExecuTorch scalar type for {}", dtype_name(t));
  }
}

int64_t EtTensor::nbytes() const {
  static const std::map<int, int64_t> element = {{0, 1}, {1, 1}, {2, 2}, {3, 4}, {4, 8}, {5, 2}, {6, 4}, {7, 8}, {11, 1}, {15, 2}};
  int64_t n = element.at(scalar_type);
  for (auto s : sizes) n *= s;
  return n;
}

namespace {

template <typename... Args>
[[noreturn]] void internal(fmt::format_string<Args...> format, Args&&... args) {
  fail(ErrorKind::Internal, format, std::forward<Args>(args)...);
}

// torch serde's ScalarType number (as_scalar_type) -> ExecuTorch's.
int et_from_serde(int serde) {
  static const std::map<int, int> m = {{1, 0}, {2, 1}, {3, 2}, {4, 3}, {5, 4}, {6, 5}, {7, 6}, {8, 7}, {12, 11}, {13, 15}};
  auto it = m.find(serde);
  if (it == m.end()) unsupported("executorch: torch scalar type {} has no ExecuTorch kernel type", serde);
  return it->second;
}

constexpr int64_t kAlignment = 16;  // exir's tensor alignment in the planned arena and the constant segment
int64_t align(int64_t v) { return (v + kAlignment - 1) / kAlignment * kAlignment; }

class Converter {
 public:
  Converter(const pt2_backend::Pt2Program& p, const EtLowerOptions& o) : p_(p), opt_(o) { bounds(); }

  EtProgram run();

 private:
  void bounds();
  std::pair<int64_t, int64_t> range(const SymExpr& e) const;
  int add(EtValue v);
  int add_int(int64_t v);
  int add_tensor(DType dtype, const std::vector<SymExpr>& shape, const std::string& what);
  int tensor_of(const std::string& name) const;
  int convert_arg(const json& arg, const std::string& where);
  int op_index(const std::string& name, const std::string& overload);
  void call(const std::string& name, const std::string& overload, std::vector<int> args);
  void lower_node(const json& node);
  void lower_matmul(const json& node, const std::string& where);
  bool delegate_linear(const json& node, const std::string& where);
  void tag_for_xnnpack(const json& node, const std::string& target, const std::vector<int>& args, int out);
  bool tag_reshape(int src, int out, const std::vector<SymExpr>& shape);
  bool xnn_float(const std::vector<int>& tensors) const;
  void partition();
  bool update_in_place(const json& node, const std::string& where);
  std::string cache_slots(const json& scatter) const;
  std::map<std::string, int> count_readers(const json& nodes, const json& output_specs) const;
  void skip_dead_cache_indices(const json& nodes, const std::map<std::string, int>& readers);
  void fold_f16_linears(const json& nodes, const std::map<std::string, int>& readers);
  bool delegate_fc(const std::string& input, const std::string& weight, const std::string& bias, const std::string& out_name,
                   const std::string& where);
  void drop_unused_constants();
  int view_sizes(int src, const std::vector<SymExpr>& src_shape, const std::vector<SymExpr>& shape, const std::string& where);
  void view_into(int src, const std::vector<SymExpr>& src_shape, int out, const std::vector<SymExpr>& shape, const std::string& where);
  int view(int src, const std::vector<SymExpr>& src_shape, DType dtype, const std::vector<SymExpr>& shape, const std::string& where);
  void plan_memory();

  const pt2_backend::Pt2Program& p_;
  const EtLowerOptions& opt_;
  std::vector<int64_t> lo_, hi_;  // per torch symbol
  EtMethod m_;
  EtProgram out_;
  std::map<std::string, int> tensors_;  // pt2 tensor name -> EValue
  std::map<std::string, int> syms_;     // pt2 SymInt name -> Int EValue
  std::set<int> buffers_;               // mutable buffers' EValues
  std::map<int, size_t> constant_of_;   // constant tensor EValue -> index in out_.constants
  std::map<int, std::string> constant_name_;
  std::set<std::string> kernels_;
  // Weight-only int8 weights (dequantize_per_channel of constants), taken whole by the XNNPACK linear
  // that reads them: pt2 tensor name -> (int8 values, scales) EValues.
  std::map<std::string, std::pair<int, int>> dequantized_;
  std::map<std::string, const json*> producer_;    // pt2 tensor name -> the node that computes it
  std::map<std::string, std::string> mutation_of_;  // pt2 tensor name -> the buffer input it becomes
  std::set<std::string> skipped_;  // pt2 tensors nothing reads once rewritten (in-place cache, f16 linears): not computed
  // XNNPACK f16 linears, to_copy(linear(to_copy(x, f16), W16, b16), f32): the outer cast's output ->
  // (x, W16, b16), one FullyConnected of f32 activations and f16 weights.
  std::map<std::string, std::array<std::string, 3>> f16_linear_;
  // --executorch-backend xnnpack: the calls an XNNPACK node computes (call index -> op), made into
  // partitions once the method is lowered.
  std::map<size_t, XnnOp> xnn_ops_;
};

void Converter::bounds() {
  for (const auto& [name, b] : p_.symbols) {
    if (!b.max)
      unsupported("executorch: dim `{}` has no upper bound; ExecuTorch plans memory for the largest shape: give --dim {}=MIN:MAX",
                  name, name);
    lo_.push_back(b.min.value_or(0));
    hi_.push_back(*b.max);
  }
}

// The least and greatest value of `e` over the symbols' ranges: at the corners of the box, since a
// shape polynomial is multilinear in its symbols (or of even degree with positive coefficients).
std::pair<int64_t, int64_t> Converter::range(const SymExpr& e) const {
  const size_t n = lo_.size();
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (size_t corner = 0; corner < (size_t(1) << n); ++corner) {
    std::vector<int64_t> at(n);
    for (size_t i = 0; i < n; ++i) at[i] = (corner >> i) & 1 ? hi_[i] : lo_[i];
    const int64_t v = e.eval(at);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  return {lo, hi};
}

int Converter::add(EtValue v) {
  m_.values.push_back(std::move(v));
  return int(m_.values.size() - 1);
}

int Converter::add_int(int64_t v) {
  EtValue e;
  e.kind = Kind::Int;
  e.i = v;
  return add(std::move(e));
}

int Converter::add_tensor(DType dtype, const std::vector<SymExpr>& shape, const std::string& what) {
  EtValue e;
  e.kind = Kind::Tensor;
  e.tensor.scalar_type = et_scalar_type(dtype);
  for (const auto& d : shape) {
    const auto [lo, hi] = range(d);
    if (hi > std::numeric_limits<int32_t>::max()) unsupported("executorch: {}: dim {} is past ExecuTorch's int32 sizes", what, d.str());
    e.tensor.sizes.push_back(std::max<int64_t>(hi, 0));
    e.tensor.dynamic = e.tensor.dynamic || lo != hi;
  }
  return add(std::move(e));
}

int Converter::tensor_of(const std::string& name) const {
  if (dequantized_.count(name))
    unsupported("executorch: the int8 weight {} is read by an op other than an XNNPACK linear layer (no portable kernel "
                "dequantizes it in hfx's programs)", name);
  auto it = tensors_.find(name);
  HFX_CHECK(it != tensors_.end(), "executorch: tensor {} used before it is computed", name);
  return it->second;
}

int Converter::convert_arg(const json& arg, const std::string& where) {
  EtValue v;
  if (arg.contains("as_tensor")) return tensor_of(arg["as_tensor"]["name"].get<std::string>());
  if (arg.contains("as_none")) return add(EtValue{});
  if (arg.contains("as_int")) return add_int(arg["as_int"].get<int64_t>());
  if (arg.contains("as_sym_int")) {
    const auto& s = arg["as_sym_int"];
    if (s.contains("as_int")) return add_int(s["as_int"].get<int64_t>());
    auto it = syms_.find(s["as_name"].get<std::string>());
    HFX_CHECK(it != syms_.end(), "executorch: {}: SymInt {} used before it is computed", where, s.dump());
    return it->second;
  }
  if (arg.contains("as_bool")) {
    v.kind = Kind::Bool;
    v.b = arg["as_bool"].get<bool>();
    return add(std::move(v));
  }
  if (arg.contains("as_float")) {
    v.kind = Kind::Double;
    v.d = arg["as_float"].get<double>();
    return add(std::move(v));
  }
  if (arg.contains("as_string")) {
    v.kind = Kind::String;
    v.s = arg["as_string"].get<std::string>();
    return add(std::move(v));
  }
  if (arg.contains("as_scalar_type")) return add_int(et_from_serde(arg["as_scalar_type"].get<int>()));
  if (arg.contains("as_ints")) {
    v.kind = Kind::IntList;
    for (const auto& i : arg["as_ints"]) v.items.push_back(add_int(i.get<int64_t>()));
    return add(std::move(v));
  }
  if (arg.contains("as_sym_ints")) {
    v.kind = Kind::IntList;
    for (const auto& i : arg["as_sym_ints"]) {
      if (i.contains("as_int")) {
        v.items.push_back(add_int(i["as_int"].get<int64_t>()));
        continue;
      }
      auto it = syms_.find(i["as_name"].get<std::string>());
      HFX_CHECK(it != syms_.end(), "executorch: {}: SymInt {} used before it is computed", where, i.dump());
      v.items.push_back(it->second);
    }
    return add(std::move(v));
  }
  if (arg.contains("as_tensors")) {
    v.kind = Kind::TensorList;
    for (const auto& t : arg["as_tensors"]) v.items.push_back(tensor_of(t["name"].get<std::string>()));
    return add(std::move(v));
  }
  if (arg.contains("as_optional_tensors")) {
    v.kind = Kind::OptionalTensorList;
    for (const auto& t : arg["as_optional_tensors"])
      v.items.push_back(t.contains("as_tensor") ? tensor_of(t["as_tensor"]["name"].get<std::string>()) : -1);
    return add(std::move(v));
  }
  unsupported("executorch: {}: an argument ExecuTorch has no value for: {}", where, arg.dump());
}

int Converter::op_index(const std::string& name, const std::string& overload) {
  for (size_t i = 0; i < m_.operators.size(); ++i)
    if (m_.operators[i].first == name && m_.operators[i].second == overload) return int(i);
  m_.operators.emplace_back(name, overload);
  kernels_.insert(overload.empty() ? name : name + "." + overload);
  return int(m_.operators.size() - 1);
}

void Converter::call(const std::string& name, const std::string& overload, std::vector<int> args) {
  m_.calls.push_back({op_index(name, overload), std::move(args)});
}

// A reshape ExecuTorch's view_copy computes at run time: fixed dims as they are, the one dim that
// varies with the contract's symbols as -1 (view_copy infers one dim, not two). With more than one
// (an encoder's scores [b*h, s, s] -> [b, h, s, s]), a trailing dim the view keeps from its source is
// read from the source at run time (aten::sym_size.int), and at most one other is -1.
int Converter::view_sizes(int src, const std::vector<SymExpr>& src_shape, const std::vector<SymExpr>& shape, const std::string& where) {
  auto varies = [&](const SymExpr& d) {
    const auto [lo, hi] = range(d);
    return lo != hi;
  };
  const int dynamic = int(std::count_if(shape.begin(), shape.end(), varies));
  // The trailing dims the view keeps unchanged: shape[i] is src_shape[i + shift].
  const ptrdiff_t shift = ptrdiff_t(src_shape.size()) - ptrdiff_t(shape.size());
  size_t kept_from = shape.size();
  while (kept_from > 0 && ptrdiff_t(kept_from) - 1 + shift >= 0 && shape[kept_from - 1] == src_shape[size_t(ptrdiff_t(kept_from) - 1 + shift)])
    --kept_from;
  EtValue sizes;
  sizes.kind = Kind::IntList;
  int inferred = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    const auto [lo, hi] = range(shape[i]);
    if (lo == hi) {
      sizes.items.push_back(add_int(hi));
    } else if (dynamic > 1 && i >= kept_from) {
      const int size = add_int(0);
      call("aten::sym_size", "int", {src, add_int(int64_t(ptrdiff_t(i) + shift)), size});
      sizes.items.push_back(size);
    } else {
      ++inferred;
      sizes.items.push_back(add_int(-1));
    }
  }
  if (inferred > 1) unsupported("executorch: {}: a matmul view with {} symbolic dims it cannot read from its source", where, inferred);
  return add(std::move(sizes));
}

void Converter::view_into(int src, const std::vector<SymExpr>& src_shape, int out, const std::vector<SymExpr>& shape,
                          const std::string& where) {
  const int sizes = view_sizes(src, src_shape, shape, where);
  call("aten::view_copy", "out", {src, sizes, out, out});
  tag_reshape(src, out, shape);
}

int Converter::view(int src, const std::vector<SymExpr>& src_shape, DType dtype, const std::vector<SymExpr>& shape,
                    const std::string& where) {
  const int out = add_tensor(dtype, shape, where);
  view_into(src, src_shape, out, shape, where);
  return out;
}

// aten.matmul is not an ExecuTorch kernel: mm for 2-D operands, bmm over the flattened batch dims
// otherwise (equal batch dims; a 2-D right operand flattens the left one's rows instead).
void Converter::lower_matmul(const json& node, const std::string& where) {
  std::string a_name, b_name;
  for (const auto& in : node["inputs"])
    (in["name"] == "self" ? a_name : b_name) = in["arg"]["as_tensor"]["name"].get<std::string>();
  const std::string out_name = node["outputs"][0]["as_tensor"]["name"].get<std::string>();
  const auto& a = p_.tensors.at(a_name);
  const auto& b = p_.tensors.at(b_name);
  const auto& o = p_.tensors.at(out_name);
  const int ta = tensor_of(a_name), tb = tensor_of(b_name);
  const int out = add_tensor(o.dtype, o.shape, where);
  tensors_[out_name] = out;
  const size_t ra = a.shape.size(), rb = b.shape.size();
  if (ra == 2 && rb == 2) return call("aten::mm", "out", {ta, tb, out, out});
  if (rb == 2) {
    SymExpr rows(1);
    for (size_t i = 0; i + 1 < ra; ++i) rows = rows * a.shape[i];
    const int a2 = view(ta, a.shape, a.dtype, {rows, a.shape.back()}, where);
    const int o2 = add_tensor(o.dtype, {rows, b.shape.back()}, where);
    call("aten::mm", "out", {a2, tb, o2, o2});
    return view_into(o2, {rows, b.shape.back()}, out, o.shape, where);
  }
  if (ra != rb || ra < 3) unsupported("executorch: {}: matmul of rank {} by rank {}", where, ra, rb);
  for (size_t i = 0; i + 2 < ra; ++i)
    if (a.shape[i] != b.shape[i]) unsupported("executorch: {}: matmul broadcasting its batch dims ({} against {})", where, a.shape[i].str(), b.shape[i].str());
  if (ra == 3) {
    call("aten::bmm", "out", {ta, tb, out, out});
    if (xnn_float({ta, tb, out})) xnn_ops_[m_.calls.size() - 1] = {XnnOp::Form::Node, XnnKind::BatchMatrixMultiply, {ta, tb}, out, {}, 0, {}};
    return;
  }
  SymExpr batch(1);
  for (size_t i = 0; i + 2 < ra; ++i) batch = batch * a.shape[i];
  const int a3 = view(ta, a.shape, a.dtype, {batch, a.shape[ra - 2], a.shape[ra - 1]}, where);
  const int b3 = view(tb, b.shape, b.dtype, {batch, b.shape[rb - 2], b.shape[rb - 1]}, where);
  const std::vector<SymExpr> o3_shape = {batch, a.shape[ra - 2], b.shape[rb - 1]};
  const int o3 = add_tensor(o.dtype, o3_shape, where);
  call("aten::bmm", "out", {a3, b3, o3, o3});
  if (xnn_float({a3, b3, o3})) xnn_ops_[m_.calls.size() - 1] = {XnnOp::Form::Node, XnnKind::BatchMatrixMultiply, {a3, b3}, o3, {}, 0, {}};
  view_into(o3, o3_shape, out, o.shape, where);
}

void Converter::lower_node(const json& node) {
  const std::string target = node["target"].get<std::string>();
  const std::string where = fmt::format("node {} ({})", node.value("name", "?"), target);
  // The bounds' runtime asserts: a DYNAMIC_BOUND tensor cannot grow past its planned capacity, so
  // ExecuTorch refuses a call outside them without the asserts.
  if (target == "torch.ops.aten._assert_scalar.default" || target == "_operator.le" || target == "_operator.ge") return;
  auto input = [&](const char* name) -> const json& {
    for (const auto& in : node["inputs"])
      if (in["name"] == name) return in["arg"];
    internal("executorch: {}: no argument {}", where, name);
  };
  if (target == "torch.ops.aten.sym_size.int") {
    const int out = add_int(0);
    syms_[node["outputs"][0]["as_sym_int"]["as_name"].get<std::string>()] = out;
    return call("aten::sym_size", "int", {convert_arg(input("self"), where), convert_arg(input("dim"), where), out});
  }
  if (target.starts_with("_operator.")) {
    const std::string op = target.substr(10);
    if (op != "add" && op != "sub" && op != "mul") unsupported("executorch: {}: no ExecuTorch kernel for SymInt {}", where, op);
    const int a = convert_arg(input("a"), where), b = convert_arg(input("b"), where);
    const int out = add_int(0);
    syms_[node["outputs"][0]["as_sym_int"]["as_name"].get<std::string>()] = out;
    return call("executorch_prim::" + op, "Scalar", {a, b, out});
  }
  if (node["outputs"].size() == 1 && node["outputs"][0].contains("as_tensor") &&
      skipped_.count(node["outputs"][0]["as_tensor"]["name"].get<std::string>()))
    return;
  if (target == "torch.ops.aten.matmul.default") return lower_matmul(node, where);
  if (target == "torch.ops.aten.scatter.src" && update_in_place(node, where)) return;
  if (target == "torch.ops.quantized_decomposed.dequantize_per_channel.default") {
    if (!opt_.xnnpack) unsupported("executorch: {}: weight-only int8 runs in XNNPACK delegates only (--executorch-backend xnnpack)", where);
    const int values = convert_arg(input("input"), where), scales = convert_arg(input("scales"), where);
    if (!constant_of_.count(values) || !constant_of_.count(scales) || input("axis").value("as_int", -1) != 0)
      unsupported("executorch: {}: dequantize_per_channel of a computed tensor or along an axis other than 0", where);
    dequantized_[node["outputs"][0]["as_tensor"]["name"].get<std::string>()] = {values, scales};
    return;
  }
  if (opt_.xnnpack && target == "torch.ops.aten.linear.default" && delegate_linear(node, where)) return;
  if (auto f = f16_linear_.find(node["outputs"][0].contains("as_tensor") ? node["outputs"][0]["as_tensor"]["name"].get<std::string>() : "");
      f != f16_linear_.end()) {
    if (!delegate_fc(f->second[0], f->second[1], f->second[2], f->first, where))
      internal("executorch: {}: an f16 linear layer XNNPACK does not take", where);
    return;
  }
  const auto& table = et_op_table();
  auto spec = table.find(target);
  if (spec == table.end()) unsupported("executorch: {}: no ExecuTorch kernel for {}", where, target);
  std::vector<int> args;
  for (const auto& a : spec->second.args) {
    const json* given = nullptr;
    for (const auto& in : node["inputs"])
      if (in["name"] == a.name) given = &in["arg"];
    if (given) {
      args.push_back(convert_arg(*given, where));
      continue;
    }
    EtValue v;
    switch (a.kind) {
      case EtArgSpec::Default::Required: internal("executorch: {}: argument {} is required", where, a.name);
      case EtArgSpec::Default::Null: break;
      case EtArgSpec::Default::Int: v.kind = Kind::Int, v.i = a.value; break;
      case EtArgSpec::Default::Bool: v.kind = Kind::Bool, v.b = a.value != 0; break;
      case EtArgSpec::Default::EmptyIntList: v.kind = Kind::IntList; break;
    }
    args.push_back(add(std::move(v)));
  }
  const std::string out_name = node["outputs"][0]["as_tensor"]["name"].get<std::string>();
  const auto& info = p_.tensors.at(out_name);
  const int out = add_tensor(info.dtype, info.shape, where);
  tensors_[out_name] = out;
  args.push_back(out);
  args.push_back(out);
  call(spec->second.name, spec->second.overload, args);
  if (opt_.xnnpack) tag_for_xnnpack(node, target, args, out);
}

namespace {

const json* named_arg(const json& node, const char* name) {
  for (const auto& in : node["inputs"])
    if (in["name"] == name) return &in["arg"];
  return nullptr;
}

std::string tensor_name(const json* a) { return a && a->contains("as_tensor") ? (*a)["as_tensor"]["name"].get<std::string>() : ""; }

}  // namespace

// The cache slots P of scatter.src(buffer, 2, expand_copy(view_copy(P)), new) when its result is the
// buffer's next value (the task's static cache update: P [T] broadcast over batch, heads and head
// dim), else "".
std::string Converter::cache_slots(const json& node) const {
  if (node["target"] != "torch.ops.aten.scatter.src") return "";
  auto made_by = [&](const std::string& name, const char* target) -> const json* {
    auto it = producer_.find(name);
    return it != producer_.end() && (*it->second)["target"] == target ? it->second : nullptr;
  };
  const std::string self = tensor_name(named_arg(node, "self")), out = node["outputs"][0]["as_tensor"]["name"].get<std::string>();
  const json* dim = named_arg(node, "dim");
  auto mutated = mutation_of_.find(out);
  if (mutated == mutation_of_.end() || mutated->second != self || !dim || dim->value("as_int", -1) != 2) return "";
  const json* expand = made_by(tensor_name(named_arg(node, "index")), "torch.ops.aten.expand_copy.default");
  const json* view = expand ? made_by(tensor_name(named_arg(*expand, "self")), "torch.ops.aten.view_copy.default") : nullptr;
  const std::string slots = view ? tensor_name(named_arg(*view, "self")) : "";
  return !slots.empty() && p_.tensors.at(slots).shape.size() == 1 ? slots : "";
}

// Once a scatter becomes index_put_ (update_in_place), its broadcast index (expand_copy of a
// view_copy of the slots) has no reader left: those nodes are not lowered, where nothing else reads
// them, so a decode step does not compute two int64 tensors per cache buffer for nothing.
// How many times each pt2 tensor is read: by nodes' arguments and by the program's outputs.
std::map<std::string, int> Converter::count_readers(const json& nodes, const json& output_specs) const {
  std::map<std::string, int> readers;
  std::function<void(const json&)> count = [&](const json& j) {
    if (j.is_array()) {
      for (const auto& e : j) count(e);
    } else if (j.is_object()) {  // {"as_tensor": {"name"}}, {"as_tensors": [{"name"}]}, or arguments holding them
      for (const auto& [key, value] : j.items()) {
        if (key == "as_tensor" && value.is_object()) ++readers[value.value("name", "")];
        else if (key == "as_tensors" && value.is_array())
          for (const auto& t : value) ++readers[t.value("name", "")];
        else count(value);
      }
    }
  };
  for (const auto& node : nodes) count(node["inputs"]);
  for (const auto& spec : output_specs)
    for (const auto& [kind, body] : spec.items()) {
      count(body);
      if (body.contains("arg") && body["arg"].contains("name")) ++readers[body["arg"]["name"].get<std::string>()];
    }
  return readers;
}

void Converter::skip_dead_cache_indices(const json& nodes, const std::map<std::string, int>& counted) {
  std::map<std::string, int> readers = counted;
  for (const auto& node : nodes) {
    if (cache_slots(node).empty()) continue;
    // index -> expand_copy -> view_copy: each dropped when its last reader was the one dropped after it
    std::string name = tensor_name(named_arg(node, "index"));
    for (int depth = 0; depth < 2 && !name.empty() && --readers[name] == 0; ++depth) {
      skipped_.insert(name);
      name = tensor_name(named_arg(*producer_.at(name), "self"));
    }
  }
}

// XNNPACK's f16 FullyConnected accumulates in f16 where the CPU computes in f16 natively (AVX512-FP16,
// ARM's FP16 arithmetic): its error then grows with the layer's depth, past the f16 budget (4.5e-5
// NMSE on a tiny Llama, 3x the weight rounding's). The f16 precision form, to_copy(linear(to_copy(x,
// f16), W16, b16), f32), becomes one FullyConnected of the f32 activations and the f16 weights, which
// XNNPACK computes in f32 (its f32 x f16-weight kernels), and the two casts go.
void Converter::fold_f16_linears(const json& nodes, const std::map<std::string, int>& readers) {
  auto made_by = [&](const std::string& name, const char* target) -> const json* {
    auto it = producer_.find(name);
    return it != producer_.end() && (*it->second)["target"] == target ? it->second : nullptr;
  };
  auto read_once = [&](const std::string& name) {
    auto it = readers.find(name);
    return it != readers.end() && it->second == 1;
  };
  auto f16_constant = [&](const std::string& name) {
    auto t = tensors_.find(name);
    return t != tensors_.end() && constant_of_.count(t->second) && m_.values[size_t(t->second)].tensor.scalar_type == 5;
  };
  for (const auto& node : nodes) {
    if (node["target"] != "torch.ops.aten._to_copy.default" || !node["outputs"][0].contains("as_tensor")) continue;
    const std::string out = node["outputs"][0]["as_tensor"]["name"].get<std::string>();
    const std::string y = tensor_name(named_arg(node, "self"));
    const json* linear = made_by(y, "torch.ops.aten.linear.default");
    if (!linear || !read_once(y) || p_.tensors.at(out).dtype != DType::F32) continue;
    const std::string xh = tensor_name(named_arg(*linear, "input")), w = tensor_name(named_arg(*linear, "weight")),
                      b = tensor_name(named_arg(*linear, "bias"));
    const json* cast = made_by(xh, "torch.ops.aten._to_copy.default");
    if (!cast || !read_once(xh) || !f16_constant(w) || (!b.empty() && !f16_constant(b))) continue;
    const std::string x = tensor_name(named_arg(*cast, "self"));
    if (x.empty() || p_.tensors.at(x).dtype != DType::F32) continue;
    f16_linear_[out] = {x, w, b};
    skipped_.insert(xh);
    skipped_.insert(y);
  }
}

// The static cache written in place: scatter.src(buffer, 2, expand_copy(view_copy(P)), new), whose
// result is the buffer's next value, becomes index_put_(buffer, [None, None, P], new). The readers of
// the result read the buffer, updated before them; nothing copies the cache.
bool Converter::update_in_place(const json& node, const std::string& where) {
  const std::string slots = cache_slots(node);
  if (slots.empty()) return false;
  const std::string self = tensor_name(named_arg(node, "self")), out = node["outputs"][0]["as_tensor"]["name"].get<std::string>();
  const int buf = tensor_of(self);
  EtValue indices;
  indices.kind = Kind::OptionalTensorList;
  indices.items = {-1, -1, tensor_of(slots)};  // -1: None
  EtValue no;
  no.kind = Kind::Bool;
  call("aten::index_put_", "", {buf, add(std::move(indices)), convert_arg(*named_arg(node, "src"), where), add(std::move(no)), buf});
  tensors_[out] = buf;
  return true;
}

// A linear layer as an XNNPACK FullyConnected delegate, when its input is f32 or f16 and its weight
// (and bias) are constants of the same dtype: the weights become named data, the call a DelegateCall(input, output).
bool Converter::delegate_linear(const json& node, const std::string& where) {
  std::string input, weight, bias;
  for (const auto& in : node["inputs"]) {
    if (!in["arg"].contains("as_tensor")) continue;
    const std::string name = in["arg"]["as_tensor"]["name"].get<std::string>();
    if (in["name"] == "input") input = name;
    if (in["name"] == "weight") weight = name;
    if (in["name"] == "bias") bias = name;
  }
  return delegate_fc(input, weight, bias, node["outputs"][0]["as_tensor"]["name"].get<std::string>(), where);
}

// The FullyConnected of `input` by the constant `weight` [N, K] (and `bias`) into the pt2 tensor
// `out_name`: f32 or f16 activations with weights of their dtype, f32 activations with f16 weights
// (fold_f16_linears), or f32 activations with int8 per-channel weights (a dequantize_per_channel).
bool Converter::delegate_fc(const std::string& input, const std::string& weight, const std::string& bias,
                            const std::string& out_name, const std::string& where) {
  const auto q8 = dequantized_.find(weight);
  const int x = tensor_of(input), w = q8 != dequantized_.end() ? q8->second.first : tensor_of(weight),
            b = bias.empty() ? -1 : tensor_of(bias);
  // ScalarType Half 5, Float 6: the input's dtype, which the weight (unless int8) and bias share.
  const int dtype = m_.values[size_t(x)].tensor.scalar_type;
  const bool f16_weights = dtype == 6 && q8 == dequantized_.end() && m_.values[size_t(w)].tensor.scalar_type == 5;
  const int weight_dtype = f16_weights ? 5 : dtype;
  auto constant_in = [&](int v) { return constant_of_.count(v) && m_.values[size_t(v)].tensor.scalar_type == weight_dtype; };
  if ((dtype != 5 && dtype != 6) || (q8 == dequantized_.end() && !constant_in(w)) || (b >= 0 && !constant_in(b))) {
    if (q8 != dequantized_.end()) unsupported("executorch: {}: an int8 linear layer on a {} input or bias", where, dtype == 5 ? "f16" : "non-f32");
    return false;
  }
  if (q8 != dequantized_.end() && dtype != 6) unsupported("executorch: {}: an int8 linear layer on an f16 input", where);
  const auto& info = p_.tensors.at(out_name);
  const int out = add_tensor(info.dtype, info.shape, where);
  tensors_[out_name] = out;
  // A placeholder call the partitioning replaces: the FullyConnected node of an XNNPACK graph.
  m_.calls.push_back({-1, {x, out}, false});
  XnnOp fc{XnnOp::Form::Node, XnnKind::FullyConnected, {x, w}, out, {}, 0, {}};
  if (b >= 0) fc.inputs.push_back(b);
  if (q8 != dequantized_.end()) {  // scales go into the XNNGraph itself (PerChannelQuant), one per output row
    const Tensor scales = out_.constants.at(constant_of_.at(q8->second.second)).materialize();
    fc.int8_scales.assign(scales.as<float>(), scales.as<float>() + scales.numel());
  }
  xnn_ops_[m_.calls.size() - 1] = std::move(fc);
  return true;
}

// True when every EValue is a tensor of one float dtype XNNPACK computes in (f32, or f16).
bool Converter::xnn_float(const std::vector<int>& tensors) const {
  int dtype = -1;
  for (int v : tensors) {
    const auto& e = m_.values[size_t(v)];
    if (e.kind != Kind::Tensor || (e.tensor.scalar_type != 5 && e.tensor.scalar_type != 6)) return false;
    if (dtype >= 0 && e.tensor.scalar_type != dtype) return false;
    dtype = e.tensor.scalar_type;
  }
  return true;
}

// A reshape (view_copy, unsqueeze_copy, squeeze_copy) of the last call as XNNPACK's static reshape:
// the output's fixed dims as they are, its one dim that varies with the contract's symbols as 0
// (XNNPACK infers it at run time); two varying dims stay a portable view.
bool Converter::tag_reshape(int src, int out, const std::vector<SymExpr>& shape) {
  if (!opt_.xnnpack || !xnn_float({src, out})) return false;
  std::vector<int64_t> new_shape;
  int varying = 0;
  for (const auto& d : shape) {
    const auto [lo, hi] = range(d);
    new_shape.push_back(lo == hi ? hi : 0);
    varying += lo != hi;
  }
  if (varying > 1) return false;
  xnn_ops_[m_.calls.size() - 1] = {XnnOp::Form::Node, XnnKind::StaticReshape, {src}, out, new_shape, 0, {}};
  return true;
}

// The last call (a table kernel: `args` its schema arguments, then out) as the XNNPACK node that
// computes it, when XNNPACK has one for its dtypes and arguments. Others stay portable kernels.
void Converter::tag_for_xnnpack(const json& node, const std::string& target, const std::vector<int>& args, int out) {
  const size_t at = m_.calls.size() - 1;
  auto node_op = [&](XnnKind k, std::vector<int> inputs, std::vector<int64_t> params = {}) {
    inputs.push_back(out);
    if (!xnn_float(inputs)) return;
    inputs.pop_back();
    xnn_ops_[at] = {XnnOp::Form::Node, k, std::move(inputs), out, std::move(params), 0, {}};
  };
  auto value = [&](size_t i) -> const EtValue& { return m_.values[size_t(args.at(i))]; };
  // An int argument given in the program (not a SymInt computed at run time), or its default.
  auto fixed_int = [&](const char* name, int64_t fallback) -> std::optional<int64_t> {
    for (const auto& in : node["inputs"])
      if (in["name"] == name) {
        if (in["arg"].contains("as_int")) return in["arg"]["as_int"].get<int64_t>();
        if (in["arg"].contains("as_none")) return fallback;
        return std::nullopt;
      }
    return fallback;
  };
  const int rank = int(m_.values[size_t(out)].tensor.sizes.size());
  auto normalized = [&](int64_t d, int r) { return d < 0 ? d + r : d; };
  const std::string out_name = node["outputs"][0]["as_tensor"]["name"].get<std::string>();
  static const std::map<std::string, XnnKind> unary = {
      {"torch.ops.aten.neg.default", XnnKind::Negate},     {"torch.ops.aten.sigmoid.default", XnnKind::Sigmoid},
      {"torch.ops.aten.tanh.default", XnnKind::Tanh},      {"torch.ops.aten.exp.default", XnnKind::Exp},
      {"torch.ops.aten.log.default", XnnKind::Log},        {"torch.ops.aten.sin.default", XnnKind::Sin},
      {"torch.ops.aten.cos.default", XnnKind::Cos},        {"torch.ops.aten.sqrt.default", XnnKind::SquareRoot},
  };
  static const std::map<std::string, XnnKind> binary = {
      {"torch.ops.aten.add.Tensor", XnnKind::Add},      {"torch.ops.aten.sub.Tensor", XnnKind::Subtract},
      {"torch.ops.aten.mul.Tensor", XnnKind::Multiply}, {"torch.ops.aten.div.Tensor", XnnKind::Divide},
  };
  if (auto u = unary.find(target); u != unary.end()) return node_op(u->second, {args[0]});
  if (auto b = binary.find(target); b != binary.end()) {
    if (b->second == XnnKind::Add || b->second == XnnKind::Subtract)
      if (fixed_int("alpha", 1) != 1) return;
    return node_op(b->second, {args[0], args[1]});
  }
  if (target == "torch.ops.aten.reciprocal.default") {  // only as rsqrt, reciprocal(sqrt(x)) (et_xnnpack_partition.cc)
    if (xnn_float({args[0], out})) xnn_ops_[at] = {XnnOp::Form::Reciprocal, XnnKind::Copy, {args[0]}, out, {}, 0, {}};
    return;
  }
  if (target == "torch.ops.aten.clone.default") return node_op(XnnKind::Copy, {args[0]});
  if (target == "torch.ops.aten.bmm.default") return node_op(XnnKind::BatchMatrixMultiply, {args[0], args[1]});
  if (target == "torch.ops.aten._softmax.default") {
    if (value(1).kind == Kind::Int && normalized(value(1).i, rank) == rank - 1 && value(2).kind == Kind::Bool && !value(2).b)
      node_op(XnnKind::Softmax, {args[0]});
    return;
  }
  if (target == "torch.ops.aten.permute_copy.default") {
    std::vector<int64_t> perm;
    for (auto i : value(1).items) perm.push_back(normalized(m_.values[size_t(i)].i, rank));
    return node_op(XnnKind::StaticTranspose, {args[0]}, perm);
  }
  if (target == "torch.ops.aten.view_copy.default" || target == "torch.ops.aten.unsqueeze_copy.default" ||
      target == "torch.ops.aten.squeeze_copy.dims") {
    tag_reshape(args[0], out, p_.tensors.at(out_name).shape);
    return;
  }
  if (target == "torch.ops.aten._to_copy.default") {  // f32 <-> f16: XNNPACK's convert
    const auto& in = m_.values[size_t(args[0])];
    const int from = in.kind == Kind::Tensor ? in.tensor.scalar_type : -1, to = m_.values[size_t(out)].tensor.scalar_type;
    if (value(2).kind == Kind::Null && (from == 5 || from == 6) && (to == 5 || to == 6))
      xnn_ops_[at] = {XnnOp::Form::Node, from == to ? XnnKind::Copy : XnnKind::Convert, {args[0]}, out, {}, 0, {}};
    return;
  }
  if (target == "torch.ops.aten.mean.dim") {  // over the last dim: a global average pooling
    const auto& dims = value(1).items;
    const auto& in_shape = p_.tensors.at(node["inputs"][0]["arg"]["as_tensor"]["name"].get<std::string>()).shape;
    const int in_rank = int(in_shape.size());
    if (dims.size() != 1 || normalized(m_.values[size_t(dims[0])].i, in_rank) != in_rank - 1 || value(3).kind != Kind::Null) return;
    if (in_shape.empty() || range(in_shape.back()).first != range(in_shape.back()).second) return;
    SymExpr rows(1);
    for (int i = 0; i + 1 < in_rank; ++i) rows = rows * in_shape[size_t(i)];
    const auto [lo, hi] = range(rows);
    std::vector<int64_t> params = {lo == hi ? hi : 0};
    int varying = 0;
    for (const auto& d : p_.tensors.at(out_name).shape) {
      const auto [dlo, dhi] = range(d);
      params.push_back(dlo == dhi ? dhi : 0);
      varying += dlo != dhi;
    }
    if (varying > 1 || !xnn_float({args[0], out})) return;
    xnn_ops_[at] = {XnnOp::Form::Mean, XnnKind::GlobalAvgPooling2d, {args[0]}, out, std::move(params), 0, {}};
    return;
  }
  if (target == "torch.ops.aten.slice_copy.Tensor") {  // step 1 along a fixed dim: a static slice
    const auto& in_shape = p_.tensors.at(node["inputs"][0]["arg"]["as_tensor"]["name"].get<std::string>()).shape;
    const auto dim = fixed_int("dim", 0), start = fixed_int("start", 0), step = fixed_int("step", 1);
    if (!dim || !start || step != 1) return;
    const int64_t d = normalized(*dim, rank);
    if (d < 0 || d >= rank) return;
    const auto [lo, hi] = range(in_shape[size_t(d)]);
    if (lo != hi) return;
    std::vector<int64_t> offsets(size_t(rank), 0), sizes;
    offsets[size_t(d)] = std::clamp<int64_t>(*start < 0 ? *start + hi : *start, 0, hi);
    for (const auto& s : p_.tensors.at(out_name).shape) {
      const auto [slo, shi] = range(s);
      sizes.push_back(slo == shi ? shi : 0);  // 0: the whole dim, whatever its size at run time
    }
    if (sizes[size_t(d)] == 0) return;
    offsets.insert(offsets.end(), sizes.begin(), sizes.end());
    return node_op(XnnKind::StaticSlice, {args[0]}, offsets);
  }
  if (target == "torch.ops.aten.expand_copy.default") {
    // A repeat along one dim of size 1 (GQA's repeat of the cache's heads, n_rep <= 5): XNNPACK has no
    // broadcast node, but concatenating n copies of the input along that dim is the same tensor.
    const auto& in_shape = p_.tensors.at(node["inputs"][0]["arg"]["as_tensor"]["name"].get<std::string>()).shape;
    const auto& out_shape = p_.tensors.at(out_name).shape;
    if (in_shape.size() != out_shape.size()) return;
    int axis = -1;
    int64_t copies = 0;
    for (size_t i = 0; i < in_shape.size(); ++i) {
      if (in_shape[i] == out_shape[i]) continue;
      const auto [ilo, ihi] = range(in_shape[i]);
      const auto [olo, ohi] = range(out_shape[i]);
      if (axis >= 0 || ilo != 1 || ihi != 1 || olo != ohi) return;
      axis = int(i);
      copies = ohi;
    }
    if (axis < 0 || copies < 2 || copies > 5) return;
    return node_op(XnnKind::Concatenate, std::vector<int>(size_t(copies), args[0]), {axis});
  }
  if (target == "torch.ops.aten.cat.default") {
    const auto& list = value(0).items;
    if (list.size() < 2 || list.size() > 5 || value(1).kind != Kind::Int) return;
    std::vector<int> inputs(list.begin(), list.end());
    return node_op(XnnKind::Concatenate, inputs, {normalized(value(1).i, rank)});
  }
}

// The runs of XNNPACK calls as delegate calls (et_xnnpack_partition.h); their constants become named data.
void Converter::partition() {
  auto named = [&](int v) {
    const std::string& key = constant_name_.at(v);
    bool known = false;
    for (const auto& [k, _] : out_.named_data) known = known || k == key;
    if (!known) out_.named_data.emplace_back(key, out_.constants.at(constant_of_.at(v)));
    return key;
  };
  auto done = partition_for_xnnpack(m_, xnn_ops_, named, out_.delegate_blobs.size());
  for (auto& b : done.blobs) out_.delegate_blobs.push_back(std::move(b));
  kernels_.clear();
  for (const auto& [name, overload] : m_.operators) kernels_.insert(overload.empty() ? name : name + "." + overload);
  for (const auto& [node, n] : done.nodes) {
    kernels_.insert("XnnpackBackend (" + node + ")");
    out_.xnnpack_nodes += n;
  }
  out_.xnnpack_calls = int64_t(done.blobs.size());
}

// Constants only delegates read live in their named-data segments: their EValues become Null (no
// kernel reads them) and the constant segment keeps the rest, renumbered.
void Converter::drop_unused_constants() {
  std::set<int> used;
  for (const auto& c : m_.calls) {
    if (c.delegate) continue;
    for (int a : c.args) {
      used.insert(a);
      const auto& e = m_.values[size_t(a)];
      if (e.kind == Kind::TensorList || e.kind == Kind::OptionalTensorList)
        for (auto i : e.items) used.insert(int(i));
    }
  }
  std::vector<ir::WeightRef> kept;
  for (auto& [v, index] : constant_of_) {
    if (!used.count(v)) {
      m_.values[size_t(v)] = EtValue{};
      continue;
    }
    kept.push_back(out_.constants[index]);
    m_.values[size_t(v)].tensor.constant = uint32_t(kept.size());
  }
  out_.constants = std::move(kept);
}

// One arena (memory_id 1): the mutable buffers first, in a region nothing else reuses; then every
// other planned tensor at the lowest 16-byte-aligned offset free for its lifetime (first def to last
// use, inclusive: a kernel reads its inputs while it writes its output), method inputs live from the
// start and outputs to the end.
void Converter::plan_memory() {
  const int n_calls = int(m_.calls.size());
  std::map<int, std::pair<int, int>> life;  // tensor EValue -> [first, last] call
  auto touch = [&](int v, int at) {
    auto [it, fresh] = life.try_emplace(v, at, at);
    if (!fresh) it->second = {std::min(it->second.first, at), std::max(it->second.second, at)};
  };
  auto planned = [&](int v) {
    const auto& e = m_.values[size_t(v)];
    return e.kind == Kind::Tensor && e.tensor.constant == 0 && !buffers_.count(v);
  };
  for (int c = 0; c < n_calls; ++c)
    for (int a : m_.calls[size_t(c)].args) {
      if (a < 0) continue;
      const auto& e = m_.values[size_t(a)];
      if (planned(a)) touch(a, c);
      if (e.kind == Kind::TensorList || e.kind == Kind::OptionalTensorList)
        for (auto i : e.items)
          if (i >= 0 && planned(int(i))) touch(int(i), c);
    }
  for (int v : m_.inputs) touch(v, -1);
  for (int v : m_.outputs) touch(v, n_calls);
  int64_t offset = 0;
  for (int b : buffers_) {
    m_.values[size_t(b)].tensor.offset = offset;
    offset = align(offset + m_.values[size_t(b)].tensor.nbytes());
  }
  const int64_t region = offset;
  struct Block {
    int64_t start, end;
    int first, last;
  };
  std::vector<std::pair<int, std::pair<int, int>>> order(life.begin(), life.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.second.first < y.second.first; });
  std::vector<Block> placed;
  int64_t top = region;
  for (const auto& [v, span] : order) {
    const int64_t size = align(std::max<int64_t>(m_.values[size_t(v)].tensor.nbytes(), 1));
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const auto& b : placed)
      if (!(b.last < span.first || span.second < b.first)) busy.emplace_back(b.start, b.end);
    std::sort(busy.begin(), busy.end());
    int64_t at = region;
    for (const auto& [s, e] : busy) {
      if (at + size <= s) break;
      at = std::max(at, e);
    }
    m_.values[size_t(v)].tensor.offset = at;
    placed.push_back({at, at + size, span.first, span.second});
    top = std::max(top, at + size);
  }
  m_.arena_bytes = top;
  out_.buffer_bytes = region;
}

EtProgram Converter::run() {
  const auto& graph = p_.model.at("graph_module").at("graph");
  const auto& signature = p_.model.at("graph_module").at("signature");
  std::set<std::string> buffer_inputs;
  for (const auto& [in, out] : opt_.shared_buffers) buffer_inputs.insert(pt2_backend::placeholder_name(in));
  std::map<std::string, std::string> buffer_port;
  for (const auto& [in, out] : opt_.shared_buffers) buffer_port[pt2_backend::placeholder_name(in)] = in;

  m_.name = "forward";
  size_t param = 0, constant = 0;
  for (const auto& spec : signature.at("input_specs")) {
    std::string ph;
    const ir::WeightRef* w = nullptr;
    if (spec.contains("parameter")) {
      ph = spec["parameter"]["arg"]["name"].get<std::string>();
      w = &p_.parameters.at(param++).weight;
    } else if (spec.contains("tensor_constant")) {
      ph = spec["tensor_constant"]["arg"]["name"].get<std::string>();
      w = &p_.constants.at(constant++).weight;
    } else if (spec.contains("user_input")) {
      ph = spec["user_input"]["arg"]["as_tensor"]["name"].get<std::string>();
    } else {
      unsupported("executorch: a program input of kind {}", spec.begin().key());
    }
    const auto& info = p_.tensors.at(ph);
    const int v = add_tensor(info.dtype, info.shape, "input " + ph);
    tensors_[ph] = v;
    if (w) {
      constant_of_[v] = out_.constants.size();
      constant_name_[v] = spec.contains("parameter") ? spec["parameter"]["parameter_name"].get<std::string>()
                                                     : spec["tensor_constant"]["tensor_constant_name"].get<std::string>();
      out_.constants.push_back(*w);
      m_.values[size_t(v)].tensor.constant = uint32_t(out_.constants.size());
      if (m_.values[size_t(v)].tensor.dynamic) internal("executorch: constant {} has a symbolic shape", ph);
    } else if (buffer_inputs.count(ph)) {
      buffers_.insert(v);
      m_.values[size_t(v)].tensor.fqn = buffer_port.at(ph);
      if (m_.values[size_t(v)].tensor.dynamic) unsupported("executorch: the cache buffer {} has a symbolic shape", ph);
    } else {
      m_.inputs.push_back(v);
    }
  }
  for (const auto& spec : signature.at("output_specs"))
    if (spec.contains("user_input_mutation"))
      mutation_of_[spec["user_input_mutation"]["arg"]["name"].get<std::string>()] =
          spec["user_input_mutation"]["user_input_name"].get<std::string>();
  for (const auto& node : graph.at("nodes"))
    for (const auto& out : node["outputs"])
      if (out.contains("as_tensor")) producer_[out["as_tensor"]["name"].get<std::string>()] = &node;
  const auto readers = count_readers(graph.at("nodes"), signature.at("output_specs"));
  skip_dead_cache_indices(graph.at("nodes"), readers);
  if (opt_.xnnpack) fold_f16_linears(graph.at("nodes"), readers);
  for (const auto& node : graph.at("nodes")) lower_node(node);
  for (const auto& spec : signature.at("output_specs")) {
    if (spec.contains("user_input_mutation")) {
      // The updated cache written back into its buffer: nothing to do when it was updated in place,
      // else copy_(self, src, non_blocking).
      const int buf = tensor_of(spec["user_input_mutation"]["user_input_name"].get<std::string>());
      const int updated = tensor_of(spec["user_input_mutation"]["arg"]["name"].get<std::string>());
      if (updated == buf) continue;
      EtValue no;
      no.kind = Kind::Bool;
      call("aten::copy_", "", {buf, updated, add(std::move(no)), buf});
    } else if (spec.contains("user_output")) {
      m_.outputs.push_back(tensor_of(spec["user_output"]["arg"]["as_tensor"]["name"].get<std::string>()));
    } else {
      unsupported("executorch: a program output of kind {}", spec.begin().key());
    }
  }
  if (opt_.xnnpack) {
    partition();
    drop_unused_constants();
  }
  plan_memory();
  out_.arena_bytes = m_.arena_bytes;
  out_.kernels.assign(kernels_.begin(), kernels_.end());
  out_.methods.push_back(std::move(m_));

  // Constant methods: no inputs, no instructions, their outputs are the values.
  for (const auto& c : opt_.metadata) {
    EtMethod meta;
    meta.name = c.name;
    EtValue v;
    v.kind = c.is_bool ? Kind::Bool : Kind::Int;
    v.i = c.value;
    v.b = c.value != 0;
    meta.values.push_back(v);
    meta.outputs = {0};
    out_.methods.push_back(std::move(meta));
  }
  if (!opt_.eos_ids.empty()) {
    EtMethod meta;
    meta.name = "get_eos_ids";
    for (auto id : opt_.eos_ids) {
      EtValue v;
      v.kind = Kind::Int;
      v.i = id;
      meta.values.push_back(v);
      meta.outputs.push_back(int(meta.values.size() - 1));
    }
    out_.methods.push_back(std::move(meta));
  }
  return std::move(out_);
}

}  // namespace

EtProgram lower_to_executorch(const pt2_backend::Pt2Program& program, const EtLowerOptions& options) {
  Converter c(program, options);
  return c.run();
}

}  // namespace hfx::executorch_backend
