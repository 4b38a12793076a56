#include "tasks/feature_extraction.h"

#include "core/error.h"
#include "tasks/task.h"

namespace hfx::tasks {

std::vector<Component> build_feature_extraction(const models::Encoder& model, const CausalLmOptions& o) {
  if (o.split_prefill || o.static_cache) bad_input("--split-prefill and --static-cache apply to decoders only");
  for (const auto& [name, b] : o.dims)
    if (name != "batch_size" && name != "sequence_length")
      bad_input("--dim {}: an encoder has only batch_size and sequence_length", name);
  const Shape bs = {Dim::sym("batch_size"), Dim::sym("sequence_length")};
  Component c{"encoder", "model", ir::Graph("main"), {}, {}, {}};
  c.inputs = {{"input_ids", DType::I64, bs}, {"attention_mask", DType::I64, bs}};
  if (model.uses_token_type_ids()) c.inputs.push_back({"token_type_ids", DType::I64, bs});
  ir::Graph& g = c.graph;
  models::EncoderInputs in;
  in.input_ids = g.add_input("input_ids", DType::I64, bs);
  in.attention_mask = g.add_input("attention_mask", DType::I64, bs);
  if (model.uses_token_type_ids()) in.token_type_ids = g.add_input("token_type_ids", DType::I64, bs);
  ir::Builder b(g);
  auto out = model.build(b, in);
  c.outputs = {{"last_hidden_state", DType::F32, {Dim::sym("batch_size"), Dim::sym("sequence_length"),
                                                  Dim::fixed(model.summary().hidden_size)}}};
  std::vector<ir::ValueId> values = {out.last_hidden_state};
  if (out.logits != ir::kNone) {
    c.outputs.push_back({"logits", DType::F32, {Dim::sym("batch_size"), Dim::fixed(model.num_labels())}});
    values.push_back(out.logits);
  }
  name_outputs(c, b, values);
  if (!o.dynamic) {
    g.symbols().set_bounds("batch_size", {1, std::nullopt});
    g.symbols().set_bounds("sequence_length", {1, std::nullopt});
    for (const auto& [name, bd] : o.dims) g.symbols().set_bounds(name, bd);
  }
  g.validate();
  return {std::move(c)};
}

namespace {

// BertModel's pooler in an encoder checkpoint (BERT family): pooler.dense.weight / .bias, bare or
// under one base-model prefix ("bert.", "roberta."). The feature-extraction outputs are fixed
// (last_hidden_state, logits) and Optimum's feature-extraction export drops the pooler too; a
// sequence-classification head that needs it binds it, so it only reaches here when unused.
bool is_unused_pooler(const std::string& name) {
  for (const std::string leaf : {"pooler.dense.weight", "pooler.dense.bias"}) {
    if (name == leaf) return true;
    if (name.size() > leaf.size() + 1 && name.ends_with("." + leaf) && name.find('.') == name.size() - leaf.size() - 1)
      return true;
  }
  return false;
}

class FeatureExtractionTask final : public Task {
 public:
  const std::string& name() const override {
    static const std::string n = "feature-extraction";
    return n;
  }
  std::vector<models::ModuleKind> needs() const override { return {models::ModuleKind::Encoder}; }
  std::vector<std::string> roles() const override { return {"encoder"}; }
  bool generative() const override { return false; }
  std::string contract_summary() const override { return "encoder, feature extraction"; }
  bool ignores_weight(const std::string& name) const override { return is_unused_pooler(name); }
  std::vector<Component> components(const models::Model& model, const CausalLmOptions& options) const override {
    return build_feature_extraction(model.encoder(), options);
  }
};

}  // namespace

const Task& feature_extraction_task() {
  static const FeatureExtractionTask task;
  return task;
}

}  // namespace hfx::tasks
