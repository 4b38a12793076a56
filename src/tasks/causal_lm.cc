#include "tasks/causal_lm.h"

#include <fmt/format.h>

#include "ir/builder.h"

namespace hfx::tasks {

namespace {
const char* kBatch = "batch_size";
const char* kSeq = "sequence_length";
const char* kPast = "past_sequence_length";
const char* kTotal = "total_sequence_length";

Shape cache_shape(const models::CacheGeometry& g, const char* len) {
  return {Dim::sym(kBatch), Dim::fixed(g.num_kv_heads), Dim::sym(len), Dim::fixed(g.head_dim)};
}
}  // namespace

std::vector<IoSpec> causal_lm_inputs(const models::CausalLm& model) {
  const auto g = model.cache();
  std::vector<IoSpec> io = {
      {"input_ids", DType::I64, {Dim::sym(kBatch), Dim::sym(kSeq)}},
      {"attention_mask", DType::I64, {Dim::sym(kBatch), Dim::sym(kTotal)}},
      {"position_ids", DType::I64, {Dim::sym(kBatch), Dim::sym(kSeq)}},
  };
  for (int64_t i = 0; i < g.num_layers; ++i) {
    io.push_back({fmt::format("past_key_values.{}.key", i), DType::F32, cache_shape(g, kPast)});
    io.push_back({fmt::format("past_key_values.{}.value", i), DType::F32, cache_shape(g, kPast)});
  }
  return io;
}

std::vector<IoSpec> causal_lm_outputs(const models::CausalLm& model) {
  const auto g = model.cache();
  std::vector<IoSpec> io = {
      {"logits", DType::F32, {Dim::sym(kBatch), Dim::sym(kSeq), Dim::fixed(model.summary().vocab_size)}}};
  for (int64_t i = 0; i < g.num_layers; ++i) {
    io.push_back({fmt::format("present.{}.key", i), DType::F32, cache_shape(g, kTotal)});
    io.push_back({fmt::format("present.{}.value", i), DType::F32, cache_shape(g, kTotal)});
  }
  return io;
}

ir::Graph build_causal_lm(const models::CausalLm& model) {
  ir::Graph graph("main");
  graph.symbols().relate_sum(kTotal, kPast, kSeq);
  std::map<std::string, ir::ValueId> ids;
  for (const auto& spec : causal_lm_inputs(model)) ids[spec.name] = graph.add_input(spec.name, spec.dtype, spec.shape);
  models::CausalLmInputs in;
  in.input_ids = ids["input_ids"];
  in.attention_mask = ids["attention_mask"];
  in.position_ids = ids["position_ids"];
  for (int64_t i = 0; i < model.cache().num_layers; ++i) {
    in.past_key.push_back(ids[fmt::format("past_key_values.{}.key", i)]);
    in.past_value.push_back(ids[fmt::format("past_key_values.{}.value", i)]);
  }
  ir::Builder b(graph);
  models::CausalLmOutputs out = model.build(b, in);

  // Name the outputs by the contract and declare their shapes: inference may know less (e.g. logits'
  // vocab axis through a reshape), the contract is what runtimes bind to.
  std::vector<ir::ValueId> values = {out.logits};
  for (size_t i = 0; i < out.present_key.size(); ++i) {
    values.push_back(out.present_key[i]);
    values.push_back(out.present_value[i]);
  }
  const auto specs = causal_lm_outputs(model);
  for (size_t i = 0; i < specs.size(); ++i) {
    graph.rename(values[i], specs[i].name);
    graph.value(values[i]).shape = specs[i].shape;
    graph.add_output(values[i]);
  }
  graph.validate();
  return graph;
}

}  // namespace hfx::tasks
