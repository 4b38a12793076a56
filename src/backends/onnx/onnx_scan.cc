#include "backends/onnx/onnx_scan.h"

#include <onnx/onnx_pb.h>

#include <optional>
#include <vector>

#include "backends/onnx/onnx_writer.h"
#include "core/error.h"
#include "ir/builder.h"
#include "ir/recurrences.h"

namespace hfx::onnx_backend {

namespace {

// The rule's per-step inputs: name and dims after [batch, heads].
struct StepInput {
  const char* name;
  std::vector<int64_t> tail;
};

struct RuleDims {
  const char* rows;  // the state's [b, H, rows, cols] attribute names
  const char* cols;
};

RuleDims rule_dims(const std::string& rule) {
  if (rule == "gated_delta") return {"key_dim", "value_dim"};
  if (rule == "ssd") return {"head_dim", "state_size"};
  unsupported("RecurrenceScan rule `{}` (hfx writes gated_delta and ssd)", rule);
}

std::vector<StepInput> step_inputs(const std::string& rule, int64_t rows, int64_t cols) {
  if (rule == "gated_delta") return {{"q", {rows}}, {"k", {rows}}, {"v", {cols}}, {"g", {}}, {"beta", {}}};
  return {{"xdt", {rows}}, {"log_decay", {}}, {"B", {cols}}, {"C", {cols}}};  // ssd: rows = P, cols = N
}

// The body's names start with the Scan node's own, so they cannot meet the outer graph's.
std::string body_prefix(const std::string& node_name) { return node_name + "/step"; }

void add_int(onnx::NodeProto& p, const char* name, int64_t v) {
  auto* a = p.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INT);
  a->set_i(v);
}

void add_ints(onnx::NodeProto& p, const char* name, const std::vector<int64_t>& v) {
  auto* a = p.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  for (int64_t x : v) a->add_ints(x);
}

// [batch, H, rows, cols] from the body's first input, when it declares them.
std::optional<std::vector<int64_t>> state_dims(const onnx::GraphProto& body) {
  if (body.input_size() == 0 || !body.input(0).type().has_tensor_type()) return std::nullopt;
  const auto& shape = body.input(0).type().tensor_type().shape();
  if (shape.dim_size() != 4) return std::nullopt;
  std::vector<int64_t> dims;
  for (int i = 1; i < 4; ++i) {
    if (!shape.dim(i).has_dim_value() || shape.dim(i).dim_value() <= 0) return std::nullopt;
    dims.push_back(shape.dim(i).dim_value());
  }
  return dims;
}

}  // namespace

ir::Graph recurrence_step_graph(const ir::Node& node) {
  const std::string rule = node.attr_str("rule");
  const RuleDims names = rule_dims(rule);
  const int64_t H = node.attr_int("heads"), rows = node.attr_int(names.rows), cols = node.attr_int(names.cols);
  ir::Graph g(rule + "_step");
  ir::Builder b(g);
  const Dim batch = Dim::sym("batch");
  const ir::ValueId state = g.add_input("state", DType::F32, {batch, Dim::fixed(H), Dim::fixed(rows), Dim::fixed(cols)});
  std::vector<ir::ValueId> in;
  for (const auto& [name, tail] : step_inputs(rule, rows, cols)) {
    Shape shape = {batch, Dim::fixed(H)};
    for (int64_t d : tail) shape.push_back(Dim::fixed(d));
    in.push_back(g.add_input(name, DType::F32, shape));
  }
  const ir::RecurrenceStep step = rule == "ssd" ? ir::ssd_step(b, state, in[0], in[1], in[2], in[3])
                                                : ir::gated_delta_rule_step(b, state, in[0], in[1], in[2], in[3], in[4]);
  g.add_output(step.state);
  g.add_output(step.out);
  return g;
}

void lower_recurrence_scan(const ir::Node& node, onnx::NodeProto& proto) {
  const ir::Graph step = recurrence_step_graph(node);
  const int64_t scanned = int64_t(step.inputs().size()) - 1;  // every input but the state
  auto* body = proto.add_attribute();
  body->set_name("body");
  body->set_type(onnx::AttributeProto_AttributeType_GRAPH);
  write_subgraph(step, body_prefix(proto.name()), *body->mutable_g());
  add_int(proto, "num_scan_inputs", scanned);
  add_ints(proto, "scan_input_axes", std::vector<int64_t>(size_t(scanned), 1));
  add_ints(proto, "scan_output_axes", {1});
}

ir::Attrs raise_recurrence_scan(const onnx::NodeProto& proto) {
  auto refuse = [&](const std::string& why) {
    unsupported("onnx: Scan node {} is not a recurrence hfx writes ({}; hfx reads back only the Scans of "
                "--onnx-recurrence scan, whose body it re-emits and compares)", proto.name(), why);
  };
  const onnx::GraphProto* body = nullptr;
  for (const auto& a : proto.attribute())
    if (a.name() == "body" && a.type() == onnx::AttributeProto_AttributeType_GRAPH) body = &a.g();
  if (!body) refuse("no body graph");
  const auto dims = state_dims(*body);
  if (!dims) refuse("its body's first input is not a [batch, heads, rows, cols] state of fixed dims");
  const std::string rule = body->input_size() == 6 ? "gated_delta" : body->input_size() == 5 ? "ssd" : "";
  if (rule.empty()) refuse(fmt::format("its body takes {} inputs, not the 6 of a delta rule or the 5 of an SSD step",
                                       body->input_size()));
  const RuleDims names = rule_dims(rule);
  ir::Node node{"RecurrenceScan", proto.name(), {}, {}, {}};
  node.attrs = {{"rule", rule}, {"heads", (*dims)[0]}, {names.rows, (*dims)[1]}, {names.cols, (*dims)[2]}};
  onnx::NodeProto expected;
  expected.set_name(proto.name());
  lower_recurrence_scan(node, expected);
  bool same = expected.attribute_size() == proto.attribute_size();
  for (int i = 0; same && i < proto.attribute_size(); ++i)
    same = expected.attribute(i).SerializeAsString() == proto.attribute(i).SerializeAsString();
  if (!same) refuse(fmt::format("its attributes differ from the {} step hfx writes for a state of {}", rule,
                                fmt::join(*dims, " x ")));
  return node.attrs;
}

}  // namespace hfx::onnx_backend
