#include "backends/openvino/ov_stateful.h"

#include <openvino/op/ops.hpp>

#include "core/error.h"

namespace hfx::openvino_backend {

namespace {

namespace op = ov::op;

std::shared_ptr<op::v0::Parameter> find_parameter(const ov::Model& m, const std::string& name) {
  for (const auto& p : m.get_parameters())
    if (p->output(0).get_names().count(name)) return p;
  return nullptr;
}

std::shared_ptr<op::v0::Result> find_result(const ov::Model& m, const std::string& name) {
  for (const auto& r : m.get_results())
    if (r->input_value(0).get_names().count(name)) return r;
  return nullptr;
}

// The cross-attention state `param` of a merged decoder as a variable initialised by the projection it
// stands for: kept_or_computed's Slice(Concat(param, computed)) becomes ReadValue(computed), whose
// value an Assign keeps. The Slice's consumers (the attention and the present output) read the
// variable; the present output goes. No beam reorder: every beam of a row reads the same source.
void keep_cross_state(ov::Model& model, const std::shared_ptr<op::v0::Parameter>& param, const tasks::StatePort& port,
                      ov::SinkVector& sinks) {
  std::shared_ptr<ov::Node> concat, slice;
  for (const auto& use : param->output(0).get_target_inputs())
    if (use.get_index() == 0 && ov::is_type<op::v0::Concat>(use.get_node())) concat = use.get_node()->shared_from_this();
  if (concat && concat->get_input_size() == 2)
    for (const auto& use : concat->output(0).get_target_inputs())
      if (ov::is_type<op::v8::Slice>(use.get_node())) slice = use.get_node()->shared_from_this();
  if (!slice || param->output(0).get_target_inputs().size() != 1)
    unsupported("openvino: the stateful layout needs the cross-attention state `{}` kept or computed as the merged "
                "decoder keeps it (Slice of Concat); use --stateless", port.past);
  auto result = find_result(model, port.present);
  if (!result) bad_input("openvino: cache input `{}` has no `{}` output to pair it with", port.past, port.present);
  const ov::Output<ov::Node> computed = concat->input_value(1);
  auto variable = std::make_shared<op::util::Variable>(op::util::VariableInfo{
      computed.get_partial_shape(), computed.get_element_type(), tasks::openvino_variable_id(port)});
  auto read = std::make_shared<op::v6::ReadValue>(computed, variable);
  read->set_friendly_name(port.past + "/read");
  slice->output(0).replace(read->output(0));
  read->output(0).get_tensor().set_names({});  // the names replace() carried over belong to the present output
  auto assign = std::make_shared<op::v6::Assign>(read, variable);
  assign->set_friendly_name(port.present + "/assign");
  sinks.push_back(assign);
  model.remove_result(result);
  model.remove_parameter(param);
}

}  // namespace

void make_stateful(const std::shared_ptr<ov::Model>& model, const std::vector<tasks::StatePort>& state) {
  auto input_ids = find_parameter(*model, "input_ids");
  if (!input_ids) bad_input("openvino: a stateful model needs an `input_ids` input (the batch size of the cache)");

  // The batch size, as a 1-element i64 tensor, for the empty initial state.
  auto batch = std::make_shared<op::v8::Gather>(std::make_shared<op::v3::ShapeOf>(input_ids, ov::element::i64),
                                                op::v0::Constant::create(ov::element::i64, ov::Shape{1}, {0}),
                                                op::v0::Constant::create(ov::element::i64, ov::Shape{}, {0}));
  auto beam_idx = std::make_shared<op::v0::Parameter>(ov::element::i32, ov::PartialShape{ov::Dimension::dynamic()});
  beam_idx->set_friendly_name("beam_idx");
  beam_idx->output(0).get_tensor().set_names({"beam_idx"});

  std::vector<std::pair<std::shared_ptr<op::v0::Parameter>, const tasks::StatePort*>> pasts;
  for (const auto& p : model->get_parameters())
    for (const auto& name : p->output(0).get_names())
      if (const tasks::StatePort* port = tasks::find_past(state, name)) pasts.emplace_back(p, port);
  if (pasts.empty()) bad_input("openvino: a stateful model needs the cache's past inputs (a growing cache); use --stateless");

  ov::SinkVector sinks;
  for (const auto& [param, port] : pasts) {
    if (port->spec.update == tasks::StateUpdate::Keep) {
      keep_cross_state(*model, param, *port, sinks);
      continue;
    }
    const std::string& past = port->past;
    const std::string& present = port->present;
    auto result = find_result(*model, present);
    if (!result) bad_input("openvino: cache input `{}` has no `{}` output to pair it with", past, present);
    // The state starts empty along the axis a step appends to ([batch, kv_heads, 0, head_dim] for a
    // KV cache), or as zeros of its whole shape when each step replaces it (a convolution state:
    // what Transformers' prefill starts from); every other dim but the batch is the one the input fixes.
    const tasks::StateSpec& spec = port->spec;
    if (spec.update == tasks::StateUpdate::WriteAtPosition)
      unsupported("openvino: the stateful layout keeps appended or replaced state only; `{}` is updated by {} (use "
                  "--stateless)", past, tasks::state_update_name(spec.update));
    const ov::PartialShape shape = param->get_partial_shape();
    std::vector<int64_t> init_dims;  // after the batch
    bool fixed = shape.rank().is_static() && shape.size() == spec.shape.size();
    for (size_t d = 1; fixed && d < shape.size(); ++d) {
      if (int64_t(d) == spec.axis) init_dims.push_back(0);
      else if (shape[d].is_dynamic()) fixed = false;
      else init_dims.push_back(shape[d].get_length());
    }
    if (!fixed)
      bad_input("openvino: cache input `{}` has shape {}, expected {} with every dim but the batch and the length fixed", past,
                shape.to_string(), shape_str(spec.shape));
    auto variable = std::make_shared<op::util::Variable>(
        op::util::VariableInfo{shape, param->get_element_type(), tasks::openvino_variable_id(*port)});
    auto init_shape = std::make_shared<op::v0::Concat>(
        ov::OutputVector{batch, op::v0::Constant::create(ov::element::i64, ov::Shape{init_dims.size()}, init_dims)}, 0);
    auto init = std::make_shared<op::v3::Broadcast>(
        op::v0::Constant::create(param->get_element_type(), ov::Shape{}, {0}), init_shape);
    auto read = std::make_shared<op::v6::ReadValue>(init, variable);
    read->set_friendly_name(past + "/read");
    auto reordered = std::make_shared<op::v8::Gather>(read, beam_idx,
                                                      op::v0::Constant::create(ov::element::i64, ov::Shape{}, {0}));
    reordered->set_friendly_name(past + "/beam_gather");
    param->output(0).replace(reordered->output(0));
    // The names stay on the Gather's output after replace(); the state has no tensor names.
    reordered->output(0).get_tensor().set_names({});
    auto assign = std::make_shared<op::v6::Assign>(result->input_value(0), variable);
    assign->set_friendly_name(present + "/assign");
    sinks.push_back(assign);
    model->remove_result(result);
    model->remove_parameter(param);
  }
  // Read by no node: it only tells Optimum which decoder it holds.
  if (auto flag = find_parameter(*model, "use_cache_branch")) model->remove_parameter(flag);
  model->add_parameters({beam_idx});
  model->add_sinks(sinks);
  model->validate_nodes_and_infer_types();
}

}  // namespace hfx::openvino_backend
