#include "backends/pt2/pt2_program.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "backends/pt2/sym_expr.h"
#include "core/error.h"

namespace hfx::pt2_backend {

using nlohmann::json;
using ir::ValueId;

std::string placeholder_name(const std::string& port) {
  std::string s;
  for (char c : port) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "_" + s;
  return s;
}

int serde_scalar_type(DType t) {
  switch (t) {
    case DType::U8: return 1;
    case DType::I8: return 2;
    case DType::I16: return 3;
    case DType::I32: return 4;
    case DType::I64: return 5;
    case DType::F16: return 6;
    case DType::F32: return 7;
    case DType::F64: return 8;
    case DType::Bool: return 12;
    case DType::BF16: return 13;
    default: unsupported("pt2: no torch dtype for {}", dtype_name(t));
  }
}

namespace {

template <typename... Args>
[[noreturn]] void internal(fmt::format_string<Args...> format, Args&&... args) {
  fail(ErrorKind::Internal, format, std::forward<Args>(args)...);
}

constexpr int kLayoutStrided = 7;
constexpr int kPositional = 1, kKeyword = 2;

bool is_integer(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::I16 || t == DType::I8 || t == DType::U8;
}

struct Arg {
  std::string name;
  json value;
  int kind = kPositional;
};

json tensor_arg(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }
json int_arg(int64_t v) { return {{"as_int", v}}; }
json ints_arg(const std::vector<int64_t>& v) { return {{"as_ints", v}}; }
json bool_arg(bool v) { return {{"as_bool", v}}; }
json dtype_arg(DType t) { return {{"as_scalar_type", serde_scalar_type(t)}}; }

class Lowerer {
 public:
  Lowerer(const ir::Graph& g, const Pt2LowerOptions& o) : g_(g), opt_(o), shapes_(g.num_values()), names_(g.num_values()) {
    declare_symbols();
  }

  Pt2Program run();

  // --- used by the op table ---
  const ir::Graph& graph() const { return g_; }
  std::string tensor(ValueId id);
  const std::vector<SymExpr>& shape(ValueId id);
  // The integer contents of a shape computation (Shape and what is computed from it, small integer
  // constants); nullopt when the value is data.
  const std::optional<std::vector<SymExpr>>& values(ValueId id);
  std::vector<SymExpr> const_values(ValueId id, const ir::Node& n, const char* what);
  json sym_arg(const SymExpr& e);
  json sym_list_arg(const std::vector<SymExpr>& v);
  // Emits `target` with `args` and binds its single tensor output to node output `out`.
  void emit(const ir::Node& n, const std::string& target, std::vector<Arg> args, size_t out,
            std::vector<std::optional<SymExpr>> computed);
  // Emits a node whose output is an intermediate tensor of the lowering (not an IR value).
  std::string emit_temp(const std::string& hfx_name, const std::string& target, std::vector<Arg> args, DType dtype,
                        const std::vector<SymExpr>& shape);
  SymExpr dim_expr(const Dim& d, const std::string& where) const;
  bool expressible(const Dim& d) const;

 private:
  void declare_symbols();
  std::string fresh(const std::string& base);
  json tensor_meta(DType dtype, const std::vector<SymExpr>& shape) const;
  // A tensor's TensorMeta in the JSON and its exact shape in the program's side table.
  void declare_tensor(const std::string& name, DType dtype, const std::vector<SymExpr>& shape) {
    tensor_values_[name] = tensor_meta(dtype, shape);
    tensors_[name] = {dtype, shape};
  }
  void declare_sym_int(const std::string& name, const SymExpr& e) {
    sym_int_values_[name] = sym_meta(e);
    sym_ints_[name] = e;
  }
  json sym_meta(const SymExpr& e) const;
  std::string sym_node(const SymExpr& e);
  std::string sym_binary(const std::string& op, const json& a, const json& b, const SymExpr& result);
  std::string placeholder_for_weight(ValueId id);
  std::string materialize(ValueId id);
  std::optional<std::vector<SymExpr>> eval_values(ValueId id);
  void add_node(const std::string& target, std::vector<Arg> args, json outputs, const std::string& hfx_name);
  void emit_bound_asserts();

  const ir::Graph& g_;
  const Pt2LowerOptions& opt_;
  std::vector<std::optional<std::vector<SymExpr>>> shapes_;
  std::vector<std::string> names_;
  std::map<ValueId, std::optional<std::vector<SymExpr>>> values_;
  std::set<std::string> used_;
  json nodes_ = json::array(), tensor_values_ = json::object(), sym_int_values_ = json::object(),
       sym_bool_values_ = json::object();
  // Contract symbols: hfx dim name -> expression over torch's s0, s1, ...
  std::map<std::string, SymExpr> dims_;
  std::vector<int64_t> hints_;
  std::vector<std::string> sympy_symbols_;  // srepr of each torch symbol, with its assumptions
  std::vector<std::pair<std::string, SymbolBounds>> roots_;          // torch symbol index -> hfx name, bounds
  std::map<int, std::pair<std::string, int64_t>> symbol_source_;     // torch symbol -> (placeholder, dim)
  std::map<std::string, std::string> sym_cache_;                     // SymExpr::str() -> sym int name
  std::vector<std::pair<ValueId, Pt2Tensor>> params_, consts_;
  std::map<ValueId, std::string> weight_placeholders_;
  std::set<std::string> ops_;
  std::map<std::string, Pt2TensorInfo> tensors_;
  std::map<std::string, SymExpr> sym_ints_;
};

std::string Lowerer::fresh(const std::string& base) {
  std::string b = placeholder_name(base);
  std::string name = b;
  for (int i = 1; used_.count(name); ++i) name = fmt::format("{}_{}", b, i);
  used_.insert(name);
  return name;
}

// Root symbols are the contract's dims as the inputs carry them; a dim the symbol table relates as a
// sum of two roots (total = past + sequence) is that sum, which torch checks on every call.
void Lowerer::declare_symbols() {
  std::vector<std::string> seen;
  for (auto id : g_.inputs())
    for (const auto& d : g_.value(id).shape)
      if (d.is_symbol() && std::find(seen.begin(), seen.end(), d.symbol) == seen.end()) seen.push_back(d.symbol);
  auto relation = [&](const std::string& s) -> const SymbolTable::Relation* {
    for (const auto& r : g_.symbols().relations())
      if (r.sum == s) return &r;
    return nullptr;
  };
  auto present = [&](const std::string& s) { return std::find(seen.begin(), seen.end(), s) != seen.end(); };
  // A relation whose other part the graph fixed (decode: total = past + sequence_length with the query
  // length 1): the fixed part is read from a Concat the IR names the sum (the cache append).
  std::map<std::string, std::pair<std::string, int64_t>> fixed_part;  // sum -> (present part, k)
  for (const auto& r : g_.symbols().relations()) {
    if (!present(r.sum) || present(r.a) == present(r.b)) continue;
    const std::string& part = present(r.a) ? r.a : r.b;
    for (const auto& n : g_.nodes()) {
      if (n.op != "Concat" || n.inputs.size() != 2) continue;
      const auto& out = g_.value(n.outputs[0]).shape;
      const size_t axis = size_t(n.attr_int("axis") < 0 ? n.attr_int("axis") + int64_t(out.size()) : n.attr_int("axis"));
      if (axis >= out.size() || out[axis].symbol != r.sum) continue;
      const Dim& x = g_.value(n.inputs[0]).shape.at(axis);
      const Dim& y = g_.value(n.inputs[1]).shape.at(axis);
      if (x.symbol == part && y.is_fixed()) fixed_part[r.sum] = {part, y.value};
      if (y.symbol == part && x.is_fixed()) fixed_part[r.sum] = {part, x.value};
      if (fixed_part.count(r.sum)) break;
    }
  }
  auto derived = [&](const std::string& s) {
    if (fixed_part.count(s)) return true;
    const auto* r = relation(s);
    return r && present(r->a) && present(r->b) && !relation(r->a) && !relation(r->b);
  };
  for (const auto& s : seen) {
    if (derived(s)) continue;
    const int index = int(roots_.size());
    const SymbolBounds b = g_.symbols().has(s) ? g_.symbols().bounds(s) : SymbolBounds{};
    roots_.push_back({s, b});
    // A hint inside the bounds (torch keeps one per backed symbol; it only guides its own tracing).
    int64_t hint = std::max<int64_t>(b.min.value_or(1), 2);
    if (b.max) hint = std::min(hint, *b.max);
    hints_.push_back(hint);
    sympy_symbols_.push_back(sympy_symbol(index, b.min.value_or(0) < 1));
    dims_[s] = SymExpr::symbol(index);
  }
  for (const auto& s : seen) {
    if (!derived(s)) continue;
    if (auto f = fixed_part.find(s); f != fixed_part.end()) dims_[s] = dims_.at(f->second.first) + SymExpr(f->second.second);
    else dims_[s] = dims_.at(relation(s)->a) + dims_.at(relation(s)->b);
  }
}

SymExpr Lowerer::dim_expr(const Dim& d, const std::string& where) const {
  if (d.is_fixed()) return SymExpr(d.value);
  if (d.is_symbol()) {
    if (auto it = dims_.find(d.symbol); it != dims_.end()) return it->second;
    // An unnamed sum the symbol table spelled as "a + b".
    if (auto plus = d.symbol.find(" + "); plus != std::string::npos)
      return dim_expr(Dim::sym(d.symbol.substr(0, plus)), where) + dim_expr(Dim::sym(d.symbol.substr(plus + 3)), where);
    internal("pt2: {}: dim `{}` is not one of the contract's input dims", where, d.symbol);
  }
  internal("pt2: {}: a dim the IR does not know and the lowering did not compute", where);
}

bool Lowerer::expressible(const Dim& d) const {
  if (d.is_fixed()) return true;
  if (!d.is_symbol()) return false;
  if (dims_.count(d.symbol)) return true;
  const auto plus = d.symbol.find(" + ");
  return plus != std::string::npos && expressible(Dim::sym(d.symbol.substr(0, plus))) &&
         expressible(Dim::sym(d.symbol.substr(plus + 3)));
}

json Lowerer::sym_meta(const SymExpr& e) const {
  if (e.is_const()) return int_arg(e.const_value());
  return {{"as_expr", {{"expr_str", e.sympy(sympy_symbols_)}, {"hint", {{"as_int", e.eval(hints_)}}}}}};
}

json Lowerer::tensor_meta(DType dtype, const std::vector<SymExpr>& shape) const {
  json sizes = json::array(), strides = json::array();
  std::vector<SymExpr> st(shape.size(), SymExpr(1));
  for (size_t i = shape.size(); i-- > 1;) st[i - 1] = st[i] * shape[i];
  for (size_t i = 0; i < shape.size(); ++i) {
    sizes.push_back(sym_meta(shape[i]));
    strides.push_back(sym_meta(st[i]));
  }
  return {{"dtype", serde_scalar_type(dtype)},
          {"sizes", sizes},
          {"requires_grad", false},
          {"device", {{"type", "cpu"}, {"index", nullptr}}},
          {"strides", strides},
          {"storage_offset", int_arg(0)},
          {"layout", kLayoutStrided}};
}

void Lowerer::add_node(const std::string& target, std::vector<Arg> args, json outputs, const std::string& hfx_name) {
  json inputs = json::array();
  for (auto& a : args) inputs.push_back({{"name", a.name}, {"arg", std::move(a.value)}, {"kind", a.kind}});
  std::string name;
  if (!outputs.empty()) {
    const json& o = outputs[0];
    name = o.contains("as_tensor") ? o["as_tensor"]["name"].get<std::string>() : o.begin().value()["as_name"].get<std::string>();
  } else {
    name = fresh("assert");
  }
  json metadata = json::object();
  if (!hfx_name.empty()) metadata["stack_trace"] = "hfx node " + hfx_name;
  nodes_.push_back({{"target", target},
                    {"inputs", std::move(inputs)},
                    {"outputs", std::move(outputs)},
                    {"metadata", std::move(metadata)},
                    {"is_hop_single_tensor_return", nullptr},
                    {"name", name}});
  ops_.insert(target);
}

std::string Lowerer::sym_binary(const std::string& op, const json& a, const json& b, const SymExpr& result) {
  const std::string name = fresh("sym_" + op);
  add_node("_operator." + op, {{"a", a}, {"b", b}}, json::array({{{"as_sym_int", {{"as_name", name}}}}}), "");
  declare_sym_int(name, result);
  return name;
}

// A SymInt value in the graph for `e`: sym_size of an input for a root symbol, `_operator` arithmetic
// over those for the rest (each expression computed once).
std::string Lowerer::sym_node(const SymExpr& e) {
  const std::string key = e.str();
  if (auto it = sym_cache_.find(key); it != sym_cache_.end()) return it->second;
  std::string name;
  if (auto s = e.as_symbol()) {
    const auto src = symbol_source_.find(*s);
    HFX_CHECK(src != symbol_source_.end(), "pt2: symbol {} has no input to read it from", symbol_name(*s));
    name = fresh("sym_size_" + src->second.first + "_" + std::to_string(src->second.second));
    add_node("torch.ops.aten.sym_size.int",
             {{"self", tensor_arg(src->second.first)}, {"dim", int_arg(src->second.second)}},
             json::array({{{"as_sym_int", {{"as_name", name}}}}}), "");
    declare_sym_int(name, e);
  } else {
    // Sum of the terms, each a product of symbols times its coefficient; the constant last.
    std::optional<std::pair<std::string, SymExpr>> acc;
    for (auto it = e.terms().rbegin(); it != e.terms().rend(); ++it) {
      const auto& [mono, coef] = *it;
      if (mono.empty()) continue;
      SymExpr prod = SymExpr::symbol(mono[0]);
      std::string pn = sym_node(prod);
      for (size_t i = 1; i < mono.size(); ++i) {
        SymExpr next = prod * SymExpr::symbol(mono[i]);
        pn = sym_binary("mul", {{"as_sym_int", {{"as_name", pn}}}}, {{"as_sym_int", {{"as_name", sym_node(SymExpr::symbol(mono[i]))}}}}, next);
        prod = next;
      }
      const int64_t mag = coef < 0 ? -coef : coef;
      SymExpr term = prod * SymExpr(mag);
      if (mag != 1) pn = sym_binary("mul", {{"as_sym_int", {{"as_name", pn}}}}, int_arg(mag), term);
      if (!acc) {
        if (coef < 0) {
          SymExpr neg = SymExpr(0) - term;
          pn = sym_binary("sub", int_arg(0), {{"as_sym_int", {{"as_name", pn}}}}, neg);
          term = neg;
        }
        acc = {pn, term};
      } else {
        SymExpr r = coef < 0 ? acc->second - term : acc->second + term;
        acc = {sym_binary(coef < 0 ? "sub" : "add", {{"as_sym_int", {{"as_name", acc->first}}}}, {{"as_sym_int", {{"as_name", pn}}}}, r), r};
      }
    }
    HFX_CHECK(acc, "pt2: sym_node of a constant");
    const int64_t c = e.const_value();
    if (c != 0) {
      SymExpr r = acc->second + SymExpr(c);
      acc = {sym_binary(c < 0 ? "sub" : "add", {{"as_sym_int", {{"as_name", acc->first}}}}, int_arg(c < 0 ? -c : c), r), r};
    }
    name = acc->first;
  }
  sym_cache_[key] = name;
  return name;
}

json Lowerer::sym_arg(const SymExpr& e) {
  if (e.is_const()) return int_arg(e.const_value());
  return {{"as_sym_int", {{"as_name", sym_node(e)}}}};
}

json Lowerer::sym_list_arg(const std::vector<SymExpr>& v) {
  bool all_const = std::all_of(v.begin(), v.end(), [](const SymExpr& e) { return e.is_const(); });
  if (all_const) {
    std::vector<int64_t> ints;
    for (const auto& e : v) ints.push_back(e.const_value());
    return ints_arg(ints);
  }
  json items = json::array();
  for (const auto& e : v) items.push_back(e.is_const() ? int_arg(e.const_value()) : json{{"as_name", sym_node(e)}});
  return {{"as_sym_ints", items}};
}

const std::vector<SymExpr>& Lowerer::shape(ValueId id) {
  auto& s = shapes_.at(size_t(id));
  if (!s) {
    // Inputs and weights: their declared shape. Node outputs are set when their node is lowered.
    const auto& v = g_.value(id);
    std::vector<SymExpr> out;
    for (const auto& d : v.shape) out.push_back(dim_expr(d, v.name));
    s = out;
  }
  return *s;
}

std::string Lowerer::placeholder_for_weight(ValueId id) {
  if (auto it = weight_placeholders_.find(id); it != weight_placeholders_.end()) return it->second;
  const ir::WeightRef& w = *g_.weight(id);
  const std::string& name = g_.value(id).name;
  // Checkpoint tensors are the module's parameters, under their checkpoint names; what the graph
  // made (tables, scalars) is a lifted constant.
  const bool param = !w.source_names().empty();
  std::string fqn;
  for (char c : name) fqn += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') ? c : '_';
  if (!param) fqn = "hfx_const" + placeholder_name(name);
  const std::string ph = fresh((param ? "p_" : "c_") + fqn);
  (param ? params_ : consts_).push_back({id, Pt2Tensor{fqn, w}});
  weight_placeholders_[id] = ph;
  declare_tensor(ph, w.dtype(), shape(id));
  return ph;
}

// A shape computation's value needed as a tensor (a position offset read from a shape): a 0-d or
// 1-d int64 tensor built from its SymInts.
std::string Lowerer::materialize(ValueId id) {
  const auto& v = *values(id);
  const auto& val = g_.value(id);
  const DType dt = val.dtype;
  if (val.shape.empty()) {
    return emit_temp(val.name, "torch.ops.aten.scalar_tensor.default", {{"s", sym_arg(v.at(0))}, {"dtype", dtype_arg(dt), kKeyword}}, dt, {});
  }
  json items = json::array();
  for (size_t i = 0; i < v.size(); ++i)
    items.push_back({{"name", emit_temp(val.name, "torch.ops.aten.scalar_tensor.default",
                                        {{"s", sym_arg(v[i])}, {"dtype", dtype_arg(dt), kKeyword}}, dt, {})}});
  return emit_temp(val.name, "torch.ops.aten.stack.default", {{"tensors", {{"as_tensors", items}}}, {"dim", int_arg(0)}}, dt,
                   {SymExpr(int64_t(v.size()))});
}

std::string Lowerer::tensor(ValueId id) {
  HFX_CHECK(id != ir::kNone, "pt2: an absent input used as a tensor");
  auto& n = names_.at(size_t(id));
  if (!n.empty()) return n;
  if (g_.weight(id)) return n = placeholder_for_weight(id);
  if (values(id)) return n = materialize(id);
  internal("pt2: value {} used before its node was lowered", g_.value(id).name);
}

std::vector<SymExpr> Lowerer::const_values(ValueId id, const ir::Node& n, const char* what) {
  const auto& v = values(id);
  if (!v) unsupported("pt2: {} ({}): {} is computed from tensor data, not from shapes", n.name, n.op, what);
  return *v;
}

const std::optional<std::vector<SymExpr>>& Lowerer::values(ValueId id) {
  auto it = values_.find(id);
  if (it == values_.end()) it = values_.emplace(id, eval_values(id)).first;
  return it->second;
}

// Shape arithmetic evaluated at lowering time: the ops that compute on shapes, over values that are
// themselves shapes or small integer constants.
std::optional<std::vector<SymExpr>> Lowerer::eval_values(ValueId id) {
  if (id == ir::kNone) return std::nullopt;
  const auto& v = g_.value(id);
  if (!is_integer(v.dtype) || v.shape.size() > 1) return std::nullopt;
  if (g_.weight(id)) {
    const auto* w = g_.weight(id);
    if (!w->is_constant() || w->shape().size() > 1 || (w->shape().size() == 1 && w->shape()[0] > 64)) return std::nullopt;
    const Tensor t = w->materialize();
    std::vector<SymExpr> out;
    for (int64_t i = 0; i < t.numel(); ++i)
      out.push_back(SymExpr(t.dtype() == DType::I64 ? t.as<int64_t>()[i] : int64_t(t.as<int32_t>()[i])));
    if (t.dtype() != DType::I64 && t.dtype() != DType::I32) return std::nullopt;
    return out;
  }
  if (v.producer < 0) return std::nullopt;
  const ir::Node& n = g_.nodes().at(size_t(v.producer));
  auto in = [&](size_t i) -> const std::optional<std::vector<SymExpr>>& { return values(n.input(i)); };
  const std::string& op = n.op;
  if (op == "Shape") {
    const auto& s = shape(n.inputs[0]);
    const int64_t rank = int64_t(s.size());
    int64_t start = n.attr_int("start", 0), end = n.attr_int("end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    return std::vector<SymExpr>(s.begin() + start, s.begin() + end);
  }
  if (op == "Squeeze" || op == "Unsqueeze" || op == "Reshape" || op == "Identity" || op == "Cast") {
    if (op == "Cast" && !is_integer(v.dtype)) return std::nullopt;
    return in(0);
  }
  if (op == "Gather") {
    const auto& data = in(0);
    const auto& idx = in(1);
    if (!data || !idx) return std::nullopt;
    std::vector<SymExpr> out;
    for (const auto& i : *idx) {
      if (!i.is_const()) return std::nullopt;
      int64_t k = i.const_value();
      if (k < 0) k += int64_t(data->size());
      if (k < 0 || k >= int64_t(data->size())) return std::nullopt;
      out.push_back((*data)[size_t(k)]);
    }
    return out;
  }
  if (op == "Concat") {
    std::vector<SymExpr> out;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const auto& part = in(i);
      if (!part) return std::nullopt;
      out.insert(out.end(), part->begin(), part->end());
    }
    return out;
  }
  if (op == "Slice") {
    const auto& data = in(0);
    const auto &st = in(1), &en = in(2);
    if (!data || !st || !en || st->size() != 1 || en->size() != 1 || !(*st)[0].is_const() || !(*en)[0].is_const()) return std::nullopt;
    if (n.input(4) != ir::kNone) {
      const auto& steps = in(4);
      if (!steps || steps->size() != 1 || (*steps)[0] != SymExpr(1)) return std::nullopt;
    }
    const int64_t size = int64_t(data->size());
    int64_t s = (*st)[0].const_value(), e = (*en)[0].const_value();
    if (s < 0) s += size;
    if (e < 0) e += size;
    s = std::clamp<int64_t>(s, 0, size);
    e = std::clamp<int64_t>(e, s, size);
    return std::vector<SymExpr>(data->begin() + s, data->begin() + e);
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    const auto &a = in(0), &b = in(1);
    if (!a || !b) return std::nullopt;
    const size_t size = std::max(a->size(), b->size());
    if ((a->size() != size && a->size() != 1) || (b->size() != size && b->size() != 1)) return std::nullopt;
    std::vector<SymExpr> out;
    for (size_t i = 0; i < size; ++i) {
      const SymExpr& x = (*a)[a->size() == 1 ? 0 : i];
      const SymExpr& y = (*b)[b->size() == 1 ? 0 : i];
      if (op == "Add") out.push_back(x + y);
      else if (op == "Sub") out.push_back(x - y);
      else if (op == "Mul") out.push_back(x * y);
      else {
        if (x.is_const() && y.is_const() && y.const_value() != 0) {
          out.push_back(SymExpr(x.const_value() / y.const_value()));  // ONNX integer Div truncates
        } else {
          auto q = x.divide_exact(y);
          if (!q) return std::nullopt;
          out.push_back(*q);
        }
      }
    }
    return out;
  }
  return std::nullopt;
}

std::string Lowerer::emit_temp(const std::string& hfx_name, const std::string& target, std::vector<Arg> args, DType dtype,
                               const std::vector<SymExpr>& shape) {
  const std::string out = fresh(target.substr(target.rfind("aten.") == std::string::npos ? 0 : target.rfind("aten.") + 5));
  add_node(target, std::move(args), json::array({tensor_arg(out)}), hfx_name);
  declare_tensor(out, dtype, shape);
  return out;
}

void Lowerer::emit(const ir::Node& n, const std::string& target, std::vector<Arg> args, size_t out,
                   std::vector<std::optional<SymExpr>> computed) {
  const ValueId id = n.outputs.at(out);
  const auto& v = g_.value(id);
  // The lowering's own shape, checked against the IR's where the IR knows the dim.
  if (computed.size() != v.shape.size())
    internal("pt2: {} ({}): computed rank {} for an output of rank {}", n.name, n.op, computed.size(), v.shape.size());
  std::vector<SymExpr> final_shape;
  for (size_t i = 0; i < v.shape.size(); ++i) {
    const Dim& d = v.shape[i];
    const bool ir_knows = d.is_fixed() || (d.is_symbol() && expressible(d));
    if (computed[i] && ir_knows && *computed[i] != dim_expr(d, n.name))
      internal("pt2: {} ({}): dim {} computed as {} where the IR says {}", n.name, n.op, i, computed[i]->str(), d.str());
    if (!computed[i] && !ir_knows) internal("pt2: {} ({}): dim {} is unknown", n.name, n.op, i);
    final_shape.push_back(computed[i] ? *computed[i] : dim_expr(d, n.name));
  }
  const std::string base = target.substr(target.rfind("aten.") == std::string::npos ? 0 : target.rfind("aten.") + 5);
  const std::string name = fresh(base.substr(0, base.find('.')));
  add_node(target, std::move(args), json::array({tensor_arg(name)}), n.name);
  declare_tensor(name, v.dtype, final_shape);
  names_[size_t(id)] = name;
  shapes_[size_t(id)] = final_shape;
}

void Lowerer::emit_bound_asserts() {
  // Derived dims' own bounds (total_sequence_length's --dim), which the roots' ranges do not imply.
  for (const auto& entry : dims_) {
    // Named copies, not structured bindings: a lambda may not capture those before C++20 (clang).
    const std::string& name = entry.first;
    const SymExpr& expr = entry.second;
    if (expr.as_symbol() || !g_.symbols().has(name)) continue;
    const auto& b = g_.symbols().bounds(name);
    auto check = [&](const char* op, const char* sympy_op, int64_t bound) {
      const std::string cmp = fresh(std::string(op) + "_" + name);
      add_node(std::string("_operator.") + op, {{"a", sym_arg(expr)}, {"b", int_arg(bound)}},
               json::array({{{"as_sym_bool", {{"as_name", cmp}}}}}), "");
      const bool hint = std::string(op) == "le" ? expr.eval(hints_) <= bound : expr.eval(hints_) >= bound;
      sym_bool_values_[cmp] = {{"as_expr", {{"expr_str", fmt::format("{}({}, Integer({}))", sympy_op, expr.sympy(sympy_symbols_), bound)},
                                            {"hint", {{"as_bool", hint}}}}}};
      add_node("torch.ops.aten._assert_scalar.default",
               {{"self", {{"as_sym_bool", {{"as_name", cmp}}}}},
                {"assert_msg", {{"as_string", fmt::format("Runtime assertion failed for expression {} {} {} ({} = {}) on node '{}'",
                                                          expr.str(), std::string(op) == "le" ? "<=" : ">=", bound, name,
                                                          expr.str(), cmp)}}}},
               json::array(), "");
    };
    if (b.max) check("le", "LessThan", *b.max);
    if (b.min && *b.min > 0) check("ge", "GreaterThan", *b.min);
  }
}

using Lowering = std::function<void(Lowerer&, const ir::Node&)>;

std::vector<std::optional<SymExpr>> known(const std::vector<SymExpr>& s) { return {s.begin(), s.end()}; }

std::vector<SymExpr> broadcast(const std::vector<std::vector<SymExpr>>& shapes, const ir::Node& n) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<SymExpr> out(rank, SymExpr(1));
  for (const auto& s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      SymExpr& o = out[rank - s.size() + i];
      const SymExpr& d = s[i];
      if (d == SymExpr(1)) continue;
      if (o == SymExpr(1)) o = d;
      else if (o != d) bad_input("pt2: {} ({}): dims {} and {} do not broadcast", n.name, n.op, o.str(), d.str());
    }
  return out;
}

int64_t norm_axis(int64_t a, size_t rank) { return a < 0 ? a + int64_t(rank) : a; }

Lowering binary(const char* target) {
  return [target](Lowerer& l, const ir::Node& n) {
    const auto out = broadcast({l.shape(n.inputs[0]), l.shape(n.inputs[1])}, n);
    std::string t = target;
    std::vector<Arg> args{{"self", tensor_arg(l.tensor(n.inputs[0]))}, {"other", tensor_arg(l.tensor(n.inputs[1]))}};
    if (n.op == "Div" && is_integer(l.graph().value(n.outputs[0]).dtype)) {  // ONNX integer Div truncates
      t = "torch.ops.aten.div.Tensor_mode";
      args.push_back({"rounding_mode", {{"as_string", "trunc"}}, kKeyword});
    }
    if (n.op == "Pow") args[1].name = "exponent";
    l.emit(n, t, std::move(args), 0, known(out));
  };
}

Lowering unary(const char* target) {
  return [target](Lowerer& l, const ir::Node& n) {
    l.emit(n, target, {{"self", tensor_arg(l.tensor(n.inputs[0]))}}, 0, known(l.shape(n.inputs[0])));
  };
}

void lower_matmul(Lowerer& l, const ir::Node& n) {
  const auto a = l.shape(n.inputs[0]), b = l.shape(n.inputs[1]);
  if (a.size() < 2 || b.size() < 2) unsupported("pt2: {}: MatMul of a vector", n.name);
  std::vector<SymExpr> out = broadcast({std::vector<SymExpr>(a.begin(), a.end() - 2), std::vector<SymExpr>(b.begin(), b.end() - 2)}, n);
  out.push_back(a[a.size() - 2]);
  out.push_back(b.back());
  l.emit(n, "torch.ops.aten.matmul.default", {{"self", tensor_arg(l.tensor(n.inputs[0]))}, {"other", tensor_arg(l.tensor(n.inputs[1]))}}, 0,
         known(out));
}

void lower_linear(Lowerer& l, const ir::Node& n) {
  auto out = l.shape(n.inputs[0]);
  out.back() = l.shape(n.inputs[1])[0];
  std::vector<Arg> args{{"input", tensor_arg(l.tensor(n.inputs[0]))}, {"weight", tensor_arg(l.tensor(n.inputs[1]))}};
  if (n.input(2) != ir::kNone) args.push_back({"bias", tensor_arg(l.tensor(n.inputs[2]))});
  l.emit(n, "torch.ops.aten.linear.default", std::move(args), 0, known(out));
}

// Per-axis, symmetric int8 DequantizeLinear (ExecuTorch's weight-only int8 Linear layers,
// passes/precision.h): quantized_decomposed's dequantize_per_channel, the op ExecuTorch's XNNPACK
// partitioner takes with the Linear that reads it.
void lower_dequantize_linear(Lowerer& l, const ir::Node& n) {
  const auto& g = l.graph();
  const auto& data = g.value(n.inputs[0]);
  if (n.input(2) != ir::kNone || n.attr_int("block_size", 0) != 0 || data.dtype != DType::I8 || g.value(n.inputs[1]).shape.size() != 1)
    unsupported("pt2: {}: DequantizeLinear other than per-axis symmetric int8 (no zero point, no blocks)", n.name);
  const int64_t axis = norm_axis(n.attr_int("axis", 1), data.shape.size());
  l.emit(n, "torch.ops.quantized_decomposed.dequantize_per_channel.default",
         {{"input", tensor_arg(l.tensor(n.inputs[0]))}, {"scales", tensor_arg(l.tensor(n.inputs[1]))},
          {"zero_points", {{"as_none", true}}}, {"axis", int_arg(axis)}, {"quant_min", int_arg(-127)}, {"quant_max", int_arg(127)},
          {"dtype", dtype_arg(DType::I8)}},
         0, known(l.shape(n.inputs[0])));
}

void lower_embedding(Lowerer& l, const ir::Node& n) {
  auto out = l.shape(n.inputs[1]);
  out.push_back(l.shape(n.inputs[0]).at(1));
  l.emit(n, "torch.ops.aten.embedding.default", {{"weight", tensor_arg(l.tensor(n.inputs[0]))}, {"indices", tensor_arg(l.tensor(n.inputs[1]))}},
         0, known(out));
}

// ONNX Gather is advanced indexing at `axis`: x[:, ..., indices].
void lower_gather(Lowerer& l, const ir::Node& n) {
  const auto data = l.shape(n.inputs[0]);
  const auto idx = l.shape(n.inputs[1]);
  const int64_t axis = norm_axis(n.attr_int("axis", 0), data.size());
  std::vector<SymExpr> out(data.begin(), data.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  json indices = json::array();
  for (int64_t i = 0; i < axis; ++i) indices.push_back({{"as_none", true}});
  indices.push_back({{"as_tensor", {{"name", l.tensor(n.inputs[1])}}}});
  l.emit(n, "torch.ops.aten.index.Tensor", {{"self", tensor_arg(l.tensor(n.inputs[0]))}, {"indices", {{"as_optional_tensors", indices}}}}, 0,
         known(out));
}

void lower_softmax(Lowerer& l, const ir::Node& n) {
  const auto& s = l.shape(n.inputs[0]);
  l.emit(n, "torch.ops.aten._softmax.default",
         {{"self", tensor_arg(l.tensor(n.inputs[0]))}, {"dim", int_arg(norm_axis(n.attr_int("axis", -1), s.size()))}, {"half_to_float", bool_arg(false)}},
         0, known(s));
}

Lowering reduce(const char* target) {
  return [target](Lowerer& l, const ir::Node& n) {
    const auto s = l.shape(n.inputs[0]);
    std::vector<int64_t> axes;
    if (n.input(1) != ir::kNone)
      for (const auto& e : l.const_values(n.inputs[1], n, "the axes")) axes.push_back(norm_axis(e.const_value(), s.size()));
    else if (n.has_attr("axes"))
      for (auto a : n.attr_ints("axes")) axes.push_back(norm_axis(a, s.size()));
    if (axes.empty())
      for (size_t i = 0; i < s.size(); ++i) axes.push_back(int64_t(i));
    const bool keep = n.attr_int("keepdims", 1) != 0;
    std::vector<SymExpr> out;
    for (size_t i = 0; i < s.size(); ++i) {
      const bool reduced = std::find(axes.begin(), axes.end(), int64_t(i)) != axes.end();
      if (!reduced) out.push_back(s[i]);
      else if (keep) out.push_back(SymExpr(1));
    }
    l.emit(n, target, {{"self", tensor_arg(l.tensor(n.inputs[0]))}, {"dim", ints_arg(axes)}, {"keepdim", bool_arg(keep)}}, 0, known(out));
  };
}

void lower_transpose(Lowerer& l, const ir::Node& n) {
  const auto s = l.shape(n.inputs[0]);
  std::vector<int64_t> perm = n.has_attr("perm") ? n.attr_ints("perm") : std::vector<int64_t>{};
  if (perm.empty())
    for (size_t i = s.size(); i-- > 0;) perm.push_back(int64_t(i));
  std::vector<SymExpr> out;
  for (auto p : perm) out.push_back(s.at(size_t(p)));
  l.emit(n, "torch.ops.aten.permute_copy.default", {{"self", tensor_arg(l.tensor(n.inputs[0]))}, {"dims", ints_arg(perm)}}, 0, known(out));
}

// ONNX Reshape: 0 copies the input's dim, -1 is inferred (torch infers it too; the lowering computes it
// for the TensorMeta when the division is exact, else takes the IR's dim).
void lower_reshape(Lowerer& l, const ir::Node& n) {
  const auto in = l.shape(n.inputs[0]);
  auto target = l.const_values(n.inputs[1], n, "the target shape");
  if (n.attr_int("allowzero", 0) != 0) unsupported("pt2: {}: Reshape allowzero", n.name);
  std::vector<std::optional<SymExpr>> out;
  std::vector<SymExpr> arg;
  SymExpr numel(1), known_part(1);
  for (const auto& d : in) numel = numel * d;
  int infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    SymExpr d = target[i];
    if (d == SymExpr(0)) d = in.at(i);
    if (d == SymExpr(-1)) {
      infer = int(i);
      out.push_back(std::nullopt);
      arg.push_back(SymExpr(-1));
      continue;
    }
    known_part = known_part * d;
    out.push_back(d);
    arg.push_back(d);
  }
  if (infer >= 0) out[size_t(infer)] = numel.divide_exact(known_part);
  l.emit(n, "torch.ops.aten.view_copy.default", {{"self", tensor_arg(l.tensor(n.inputs[0]))}, {"size", l.sym_list_arg(arg)}}, 0, out);
}

void lower_unsqueeze(Lowerer& l, const ir::Node& n) {
  auto s = l.shape(n.inputs[0]);
  const auto given = l.const_values(n.inputs[1], n, "the axes");
  const size_t rank = s.size() + given.size();  // ONNX Unsqueeze axes index the output
  std::vector<int64_t> axes;
  for (const auto& e : given) axes.push_back(norm_axis(e.const_value(), rank));
  std::sort(axes.begin(), axes.end());
  // One unsqueeze_copy per axis, in increasing order (each index is in the final rank).
  std::string cur = l.tensor(n.inputs[0]);
  for (size_t i = 0; i < axes.size(); ++i) {
    s.insert(s.begin() + axes[i], SymExpr(1));
    if (i + 1 == axes.size()) {
      l.emit(n, "torch.ops.aten.unsqueeze_copy.default", {{"self", tensor_arg(cur)}, {"dim", int_arg(axes[i])}}, 0, known(s));
    } else {
      cur = l.emit_temp(n.name, "torch.ops.aten.unsqueeze_copy.default", {{"self", tensor_arg(cur)}, {"dim", int_arg(axes[i])}},
                        l.graph().value(n.outputs[0]).dtype, s);
    }
  }
}

void lower_squeeze(Lowerer& l, const ir::Node& n) {
  const auto s = l.shape(n.inputs[0]);
  std::vector<int64_t> axes;
  if (n.input(1) != ir::kNone)
    for (const auto& e : l.const_values(n.inputs[1], n, "the axes")) axes.push_back(norm_axis(e.const_value(), s.size()));
  else
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == SymExpr(1)) axes.push_back(int64_t(i));
  std::vector<SymExpr> out;
  for (size_t i = 0; i < s.size(); ++i)
    if (std::find(axes.begin(), axes.end(), int64_t(i)) == axes.end()) out.push_back(s[i]);
  l.emit(n, "torch.ops.aten.squeeze_copy.dims", {{"self", tensor_arg(l.tensor(n.inputs[0]))}, {"dim", ints_arg(axes)}}, 0, known(out));
}

void lower_concat(Lowerer& l, const ir::Node& n) {
  auto out = l.shape(n.inputs[0]);
  const int64_t axis = norm_axis(n.attr_int("axis"), out.size());
  json tensors = json::array();
  SymExpr total(0);
  for (auto id : n.inputs) {
    tensors.push_back({{"name", l.tensor(id)}});
    total = total + l.shape(id).at(size_t(axis));
  }
  out[size_t(axis)] = total;
  l.emit(n, "torch.ops.aten.cat.default", {{"tensors", {{"as_tensors", tensors}}}, {"dim", int_arg(axis)}}, 0, known(out));
}

// Slice with ONNX's clamping: a constant bound past the dim (INT64_MAX) is the dim; negative bounds
// count from the end. One slice_copy per axis.
void lower_slice(Lowerer& l, const ir::Node& n) {
  auto s = l.shape(n.inputs[0]);
  const auto starts = l.const_values(n.inputs[1], n, "the starts");
  const auto ends = l.const_values(n.inputs[2], n, "the ends");
  std::vector<int64_t> axes, steps;
  if (n.input(3) != ir::kNone)
    for (const auto& e : l.const_values(n.inputs[3], n, "the axes")) axes.push_back(norm_axis(e.const_value(), s.size()));
  else
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (n.input(4) != ir::kNone)
    for (const auto& e : l.const_values(n.inputs[4], n, "the steps")) steps.push_back(e.const_value());
  else
    steps.assign(starts.size(), 1);
  std::string cur = l.tensor(n.inputs[0]);
  const DType dt = l.graph().value(n.outputs[0]).dtype;
  for (size_t i = 0; i < axes.size(); ++i) {
    const SymExpr dim = s.at(size_t(axes[i]));
    const int64_t step = steps.at(i);
    if (step <= 0) unsupported("pt2: {}: Slice step {}", n.name, step);
    auto bound = [&](const SymExpr& b) -> SymExpr {
      if (!b.is_const()) return b;
      int64_t v = b.const_value();
      if (dim.is_const()) {
        const int64_t d = dim.const_value();
        if (v < 0) v += d;
        return SymExpr(std::clamp<int64_t>(v, 0, d));
      }
      if (v >= (int64_t(1) << 62)) return dim;
      if (v < 0) return dim + SymExpr(v);
      return SymExpr(v);  // a constant inside a symbolic dim: the contract's bounds keep it there
    };
    const SymExpr b0 = bound(starts.at(i)), b1 = bound(ends.at(i));
    SymExpr len = b1 - b0;
    if (step != 1) {
      if (!len.is_const()) unsupported("pt2: {}: Slice step {} over a symbolic dim", n.name, step);
      len = SymExpr(std::max<int64_t>(0, (len.const_value() + step - 1) / step));
    }
    s[size_t(axes[i])] = len;
    std::vector<Arg> args{{"self", tensor_arg(cur)}, {"dim", int_arg(axes[i])}, {"start", l.sym_arg(starts[i])}, {"end", l.sym_arg(ends[i])},
                          {"step", int_arg(step)}};
    if (i + 1 == axes.size()) l.emit(n, "torch.ops.aten.slice_copy.Tensor", std::move(args), 0, known(s));
    else cur = l.emit_temp(n.name, "torch.ops.aten.slice_copy.Tensor", std::move(args), dt, s);
  }
}

// ONNX Expand broadcasts the input with the target shape; torch's expand takes the full size, with -1
// for a dim kept from the input.
void lower_expand(Lowerer& l, const ir::Node& n) {
  const auto in = l.shape(n.inputs[0]);
  const auto target = l.const_values(n.inputs[1], n, "the target shape");
  const auto out = broadcast({in, target}, n);
  std::vector<SymExpr> size;
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t lead = out.size() - in.size();
    size.push_back(i >= lead && in[i - lead] == out[i] ? SymExpr(-1) : out[i]);
  }
  l.emit(n, "torch.ops.aten.expand_copy.default", {{"self", tensor_arg(l.tensor(n.inputs[0]))}, {"size", l.sym_list_arg(size)}}, 0, known(out));
}

void lower_where(Lowerer& l, const ir::Node& n) {
  const auto out = broadcast({l.shape(n.inputs[0]), l.shape(n.inputs[1]), l.shape(n.inputs[2])}, n);
  l.emit(n, "torch.ops.aten.where.self",
         {{"condition", tensor_arg(l.tensor(n.inputs[0]))}, {"self", tensor_arg(l.tensor(n.inputs[1]))}, {"other", tensor_arg(l.tensor(n.inputs[2]))}},
         0, known(out));
}

void lower_cast(Lowerer& l, const ir::Node& n) {
  const DType to = l.graph().value(n.outputs[0]).dtype;
  l.emit(n, "torch.ops.aten._to_copy.default", {{"self", tensor_arg(l.tensor(n.inputs[0]))}, {"dtype", dtype_arg(to), kKeyword}}, 0,
         known(l.shape(n.inputs[0])));
}

void lower_range(Lowerer& l, const ir::Node& n) {
  const auto start = l.const_values(n.inputs[0], n, "the start"), end = l.const_values(n.inputs[1], n, "the limit"),
             step = l.const_values(n.inputs[2], n, "the delta");
  if (start.size() != 1 || end.size() != 1 || step.size() != 1 || step[0] != SymExpr(1))
    unsupported("pt2: {}: Range needs scalar bounds and delta 1", n.name);
  const DType dt = l.graph().value(n.outputs[0]).dtype;
  l.emit(n, "torch.ops.aten.arange.start_step",
         {{"start", l.sym_arg(start[0])}, {"end", l.sym_arg(end[0])}, {"step", int_arg(1)}, {"dtype", dtype_arg(dt), kKeyword},
          {"layout", {{"as_layout", kLayoutStrided}}, kKeyword}, {"device", {{"as_device", {{"type", "cpu"}, {"index", nullptr}}}}, kKeyword},
          {"pin_memory", bool_arg(false), kKeyword}},
         0, {end[0] - start[0]});
}

void lower_cumsum(Lowerer& l, const ir::Node& n) {
  if (n.attr_int("exclusive", 0) != 0 || n.attr_int("reverse", 0) != 0) unsupported("pt2: {}: CumSum exclusive/reverse", n.name);
  const auto& s = l.shape(n.inputs[0]);
  const auto axis = l.const_values(n.inputs[1], n, "the axis");
  const DType dt = l.graph().value(n.outputs[0]).dtype;
  l.emit(n, "torch.ops.aten.cumsum.default",
         {{"self", tensor_arg(l.tensor(n.inputs[0]))}, {"dim", int_arg(norm_axis(axis.at(0).const_value(), s.size()))}, {"dtype", dtype_arg(dt), kKeyword}},
         0, known(s));
}

void lower_scatter_elements(Lowerer& l, const ir::Node& n) {
  if (n.attr_str("reduction", "none") != "none") unsupported("pt2: {}: ScatterElements reduction", n.name);
  const auto& s = l.shape(n.inputs[0]);
  l.emit(n, "torch.ops.aten.scatter.src",
         {{"self", tensor_arg(l.tensor(n.inputs[0]))}, {"dim", int_arg(norm_axis(n.attr_int("axis", 0), s.size()))},
          {"index", tensor_arg(l.tensor(n.inputs[1]))}, {"src", tensor_arg(l.tensor(n.inputs[2]))}},
         0, known(s));
}

const std::map<std::string, Lowering>& lowering_table() {
  static const std::map<std::string, Lowering> table = {
      {"Add", binary("torch.ops.aten.add.Tensor")},
      {"Sub", binary("torch.ops.aten.sub.Tensor")},
      {"Mul", binary("torch.ops.aten.mul.Tensor")},
      {"Div", binary("torch.ops.aten.div.Tensor")},
      {"Pow", binary("torch.ops.aten.pow.Tensor_Tensor")},
      {"Equal", binary("torch.ops.aten.eq.Tensor")},
      {"Less", binary("torch.ops.aten.lt.Tensor")},
      {"LessOrEqual", binary("torch.ops.aten.le.Tensor")},
      {"Greater", binary("torch.ops.aten.gt.Tensor")},
      {"GreaterOrEqual", binary("torch.ops.aten.ge.Tensor")},
      {"And", binary("torch.ops.aten.logical_and.default")},
      {"Or", binary("torch.ops.aten.logical_or.default")},
      {"Neg", unary("torch.ops.aten.neg.default")},
      {"Sqrt", unary("torch.ops.aten.sqrt.default")},
      {"Reciprocal", unary("torch.ops.aten.reciprocal.default")},
      {"Exp", unary("torch.ops.aten.exp.default")},
      {"Log", unary("torch.ops.aten.log.default")},
      {"Sin", unary("torch.ops.aten.sin.default")},
      {"Cos", unary("torch.ops.aten.cos.default")},
      {"Tanh", unary("torch.ops.aten.tanh.default")},
      {"Erf", unary("torch.ops.aten.erf.default")},
      {"Sigmoid", unary("torch.ops.aten.sigmoid.default")},
      {"Not", unary("torch.ops.aten.logical_not.default")},
      {"Identity", unary("torch.ops.aten.clone.default")},
      {"MatMul", lower_matmul},
      {"Linear", lower_linear},
      {"DequantizeLinear", lower_dequantize_linear},
      {"Embedding", lower_embedding},
      {"Gather", lower_gather},
      {"Softmax", lower_softmax},
      {"ReduceMean", reduce("torch.ops.aten.mean.dim")},
      {"ReduceMax", reduce("torch.ops.aten.amax.default")},
      {"ReduceSum", reduce("torch.ops.aten.sum.dim_IntList")},
      {"Transpose", lower_transpose},
      {"Reshape", lower_reshape},
      {"Unsqueeze", lower_unsqueeze},
      {"Squeeze", lower_squeeze},
      {"Concat", lower_concat},
      {"Slice", lower_slice},
      {"Expand", lower_expand},
      {"Where", lower_where},
      {"Cast", lower_cast},
      {"Range", lower_range},
      {"CumSum", lower_cumsum},
      {"ScatterElements", lower_scatter_elements},
  };
  return table;
}

// The ops whose integer results are shape arithmetic when their inputs are: evaluated, not emitted.
bool shape_arithmetic(const std::string& op) {
  static const std::set<std::string> ops = {"Shape", "Squeeze", "Unsqueeze", "Reshape", "Identity", "Cast", "Gather",
                                            "Concat", "Slice", "Add", "Sub", "Mul", "Div"};
  return ops.count(op) > 0;
}

std::string treespec_leaves(size_t n) {
  json leaves = json::array();
  for (size_t i = 0; i < n; ++i) leaves.push_back({{"type", nullptr}, {"context", nullptr}, {"children_spec", json::array()}});
  return leaves.dump();
}

Pt2Program Lowerer::run() {
  // Every op has a lowering before anything is emitted: an unsupported graph fails naming its node.
  for (const auto& n : g_.nodes())
    if (!lowering_table().count(n.op) && n.op != "Shape")
      unsupported("pt2: node {}: no ATen lowering for op {} (the pt2 format lowers: {})", n.name, n.op,
                  fmt::join([] {
                    std::vector<std::string> k;
                    for (const auto& [op, _] : lowering_table()) k.push_back(op);
                    return k;
                  }(), ", "));
  std::map<std::string, std::string> mutated_by;  // output port -> input port
  for (const auto& [in, out] : opt_.shared_buffers) mutated_by[out] = in;

  json user_inputs = json::array();
  std::vector<std::string> arg_names;
  for (auto id : g_.inputs()) {
    const auto& v = g_.value(id);
    const std::string ph = fresh(v.name);
    names_[size_t(id)] = ph;
    declare_tensor(ph, v.dtype, shape(id));
    user_inputs.push_back({{"user_input", {{"arg", tensor_arg(ph)}}}});
    arg_names.push_back(ph);
    for (size_t d = 0; d < v.shape.size(); ++d)
      if (auto s = shape(id)[d].as_symbol(); s && !symbol_source_.count(*s)) symbol_source_[*s] = {ph, int64_t(d)};
  }
  emit_bound_asserts();

  for (const auto& n : g_.nodes()) {
    if (n.outputs.size() == 1 && shape_arithmetic(n.op) && values(n.outputs[0])) continue;  // evaluated on use
    if (n.op == "Shape") internal("pt2: {}: Shape not evaluated", n.name);
    with_context(fmt::format("pt2: node {} ({})", n.name, n.op), [&] { lowering_table().at(n.op)(*this, n); });
  }

  // Outputs: the in-place updates first (torch's order), then the user outputs by port name.
  json outputs = json::array(), output_specs = json::array(), user_output_names = json::array();
  for (auto id : g_.outputs()) {
    const auto& v = g_.value(id);
    auto it = mutated_by.find(v.name);
    if (it == mutated_by.end()) continue;
    auto in = g_.find(it->second);
    HFX_CHECK(in, "pt2: shared buffer input {} is not a graph input", it->second);
    outputs.push_back(tensor_arg(tensor(id)));
    output_specs.push_back({{"user_input_mutation", {{"arg", {{"name", tensor(id)}}}, {"user_input_name", names_[size_t(*in)]}}}});
  }
  for (auto id : g_.outputs()) {
    const auto& v = g_.value(id);
    if (mutated_by.count(v.name)) continue;
    outputs.push_back(tensor_arg(tensor(id)));
    output_specs.push_back({{"user_output", {{"arg", tensor_arg(tensor(id))}}}});
    user_output_names.push_back(v.name);
  }

  json inputs = json::array(), input_specs = json::array();
  for (const auto& [id, t] : params_) {
    inputs.push_back(tensor_arg(weight_placeholders_.at(id)));
    input_specs.push_back({{"parameter", {{"arg", {{"name", weight_placeholders_.at(id)}}}, {"parameter_name", t.fqn}}}});
  }
  for (const auto& [id, t] : consts_) {
    inputs.push_back(tensor_arg(weight_placeholders_.at(id)));
    input_specs.push_back({{"tensor_constant", {{"arg", {{"name", weight_placeholders_.at(id)}}}, {"tensor_constant_name", t.fqn}}}});
  }
  for (const auto& u : user_inputs) {
    inputs.push_back(u["user_input"]["arg"]);
    input_specs.push_back(u);
  }

  const std::string in_spec = fmt::format(
      R"([1, {{"type": "builtins.tuple", "context": "null", "children_spec": [{{"type": "builtins.tuple", "context": "null", "children_spec": {}}}, {{"type": "builtins.dict", "context": "[]", "children_spec": []}}]}}])",
      treespec_leaves(arg_names.size()));
  const std::string out_spec = fmt::format(R"([1, {{"type": "builtins.dict", "context": {}, "children_spec": {}}}])",
                                           json(user_output_names.dump()).dump(), treespec_leaves(user_output_names.size()));

  json range_constraints = json::object();
  for (size_t i = 0; i < roots_.size(); ++i) {
    const auto& b = roots_[i].second;
    // An unbounded max is null, as torch writes int_oo.
    range_constraints[symbol_name(int(i))] = {{"min_val", b.min.value_or(0)}, {"max_val", b.max ? json(*b.max) : json(nullptr)}};
  }

  Pt2Program p;
  p.model = {
      {"graph_module",
       {{"graph",
         {{"inputs", inputs},
          {"outputs", outputs},
          {"nodes", nodes_},
          {"tensor_values", tensor_values_},
          {"sym_int_values", sym_int_values_},
          {"sym_bool_values", sym_bool_values_},
          {"is_single_tensor_return", false},
          {"custom_obj_values", json::object()},
          {"sym_float_values", json::object()}}},
        {"signature", {{"input_specs", input_specs}, {"output_specs", output_specs}}},
        {"module_call_graph",
         json::array({{{"fqn", ""},
                       {"signature",
                        {{"inputs", json::array()},
                         {"outputs", json::array()},
                         {"in_spec", in_spec},
                         {"out_spec", out_spec},
                         {"forward_arg_names", arg_names}}}}})},
        {"metadata", json::object()},
        {"treespec_namedtuple_fields", json::object()}}},
      {"opset_version", {{"aten", 10}}},
      {"range_constraints", range_constraints},
      {"schema_version", {{"major", 8}, {"minor", 20}}},
      {"verifiers", json::array({"ATEN"})},
      {"torch_version", "2.13.0+cpu"},
      {"guards_code", json::array()},
  };
  for (auto& [id, t] : params_) p.parameters.push_back(t);
  for (auto& [id, t] : consts_) p.constants.push_back(t);
  p.ops.assign(ops_.begin(), ops_.end());
  p.tensors = std::move(tensors_);
  p.sym_ints = std::move(sym_ints_);
  for (const auto& [name, b] : roots_) p.symbols.push_back({name, b});
  return p;
}

}  // namespace

Pt2Program lower_to_pt2(const ir::Graph& graph, const Pt2LowerOptions& options) {
  Lowerer l(graph, options);
  return l.run();
}

}  // namespace hfx::pt2_backend
