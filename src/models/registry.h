// The one table from config.json's `model_type` to an architecture definition.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "models/model.h"

namespace hfx::models {

struct ModelEntry {
  std::string model_type;
  std::string hf_class;  // the Transformers class reproduced
  std::string notes;     // what distinguishes it, for `hfx formats` / docs
  std::function<std::unique_ptr<CausalLm>(const io::Checkpoint&)> make;
};

const std::vector<ModelEntry>& model_registry();
// Unsupported naming the model_type and the supported ones when there is no entry.
const ModelEntry& find_model(const std::string& model_type);
// Reads config.json's model_type and builds the definition (weights stay lazy).
std::unique_ptr<CausalLm> load_causal_lm(const io::Checkpoint& ckpt);

}  // namespace hfx::models
