#include "backends/executorch/et_ops.h"

namespace hfx::executorch_backend {

namespace {

using D = EtArgSpec::Default;

EtArgSpec req(const char* name) { return {D::Required, name, 0}; }
EtArgSpec null(const char* name) { return {D::Null, name, 0}; }
EtArgSpec integer(const char* name, int64_t v) { return {D::Int, name, v}; }
EtArgSpec boolean(const char* name, bool v) { return {D::Bool, name, v ? 1 : 0}; }

EtOpSpec binary(const char* name, const char* overload) { return {name, overload, {req("self"), req("other")}}; }
EtOpSpec unary(const char* name) { return {name, "out", {req("self")}}; }

}  // namespace

const std::map<std::string, EtOpSpec>& et_op_table() {
  static const std::map<std::string, EtOpSpec> table = {
      {"torch.ops.aten.add.Tensor", {"aten::add", "out", {req("self"), req("other"), integer("alpha", 1)}}},
      {"torch.ops.aten.sub.Tensor", {"aten::sub", "out", {req("self"), req("other"), integer("alpha", 1)}}},
      {"torch.ops.aten.mul.Tensor", binary("aten::mul", "out")},
      {"torch.ops.aten.div.Tensor", binary("aten::div", "out")},
      {"torch.ops.aten.div.Tensor_mode", {"aten::div", "out_mode", {req("self"), req("other"), null("rounding_mode")}}},
      {"torch.ops.aten.pow.Tensor_Tensor", {"aten::pow", "Tensor_Tensor_out", {req("self"), req("exponent")}}},
      {"torch.ops.aten.eq.Tensor", binary("aten::eq", "Tensor_out")},
      {"torch.ops.aten.lt.Tensor", binary("aten::lt", "Tensor_out")},
      {"torch.ops.aten.le.Tensor", binary("aten::le", "Tensor_out")},
      {"torch.ops.aten.gt.Tensor", binary("aten::gt", "Tensor_out")},
      {"torch.ops.aten.ge.Tensor", binary("aten::ge", "Tensor_out")},
      {"torch.ops.aten.logical_and.default", binary("aten::logical_and", "out")},
      {"torch.ops.aten.logical_or.default", binary("aten::logical_or", "out")},
      {"torch.ops.aten.neg.default", unary("aten::neg")},
      {"torch.ops.aten.sqrt.default", unary("aten::sqrt")},
      {"torch.ops.aten.reciprocal.default", unary("aten::reciprocal")},
      {"torch.ops.aten.exp.default", unary("aten::exp")},
      {"torch.ops.aten.log.default", unary("aten::log")},
      {"torch.ops.aten.sin.default", unary("aten::sin")},
      {"torch.ops.aten.cos.default", unary("aten::cos")},
      {"torch.ops.aten.tanh.default", unary("aten::tanh")},
      {"torch.ops.aten.erf.default", unary("aten::erf")},
      {"torch.ops.aten.sigmoid.default", unary("aten::sigmoid")},
      {"torch.ops.aten.logical_not.default", unary("aten::logical_not")},
      {"torch.ops.aten.clone.default", {"aten::clone", "out", {req("self"), null("memory_format")}}},
      {"torch.ops.aten.linear.default", {"aten::linear", "out", {req("input"), req("weight"), null("bias")}}},
      {"torch.ops.aten.embedding.default",
       {"aten::embedding", "out",
        {req("weight"), req("indices"), integer("padding_idx", -1), boolean("scale_grad_by_freq", false), boolean("sparse", false)}}},
      {"torch.ops.aten.index.Tensor", {"aten::index", "Tensor_out", {req("self"), req("indices")}}},
      {"torch.ops.aten._softmax.default", {"aten::_softmax", "out", {req("self"), req("dim"), req("half_to_float")}}},
      {"torch.ops.aten.mean.dim", {"aten::mean", "out", {req("self"), req("dim"), boolean("keepdim", false), null("dtype")}}},
      {"torch.ops.aten.amax.default", {"aten::amax", "out", {req("self"), {D::EmptyIntList, "dim", 0}, boolean("keepdim", false)}}},
      {"torch.ops.aten.sum.dim_IntList", {"aten::sum", "IntList_out", {req("self"), req("dim"), boolean("keepdim", false), null("dtype")}}},
      {"torch.ops.aten.permute_copy.default", {"aten::permute_copy", "out", {req("self"), req("dims")}}},
      {"torch.ops.aten.view_copy.default", {"aten::view_copy", "out", {req("self"), req("size")}}},
      {"torch.ops.aten.unsqueeze_copy.default", {"aten::unsqueeze_copy", "out", {req("self"), req("dim")}}},
      {"torch.ops.aten.squeeze_copy.dims", {"aten::squeeze_copy", "dims_out", {req("self"), req("dim")}}},
      {"torch.ops.aten.cat.default", {"aten::cat", "out", {req("tensors"), integer("dim", 0)}}},
      {"torch.ops.aten.slice_copy.Tensor",
       {"aten::slice_copy", "Tensor_out", {req("self"), integer("dim", 0), null("start"), null("end"), integer("step", 1)}}},
      {"torch.ops.aten.expand_copy.default", {"aten::expand_copy", "out", {req("self"), req("size"), boolean("implicit", false)}}},
      {"torch.ops.aten.where.self", {"aten::where", "self_out", {req("condition"), req("self"), req("other")}}},
      // The dtype is the out tensor's (layout, device and pin_memory do not exist on ExecuTorch).
      {"torch.ops.aten._to_copy.default", {"aten::_to_copy", "out", {req("self"), boolean("non_blocking", false), null("memory_format")}}},
      {"torch.ops.aten.arange.start_step", {"aten::arange", "start_out", {req("start"), req("end"), integer("step", 1)}}},
      {"torch.ops.aten.cumsum.default", {"aten::cumsum", "out", {req("self"), req("dim"), null("dtype")}}},
      {"torch.ops.aten.scatter.src", {"aten::scatter", "src_out", {req("self"), req("dim"), req("index"), req("src")}}},
      {"torch.ops.aten.scalar_tensor.default", {"aten::scalar_tensor", "out", {req("s")}}},
      {"torch.ops.aten.stack.default", {"aten::stack", "out", {req("tensors"), integer("dim", 0)}}},
  };
  return table;
}

}  // namespace hfx::executorch_backend
