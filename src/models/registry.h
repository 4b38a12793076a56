// The one table from config.json's `model_type` to an architecture definition: decoders (the Llama
// family as DecoderTraits rows, GPT-2, GPT-NeoX) and encoders (the BERT family) alike.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "models/model.h"

namespace hfx::models {

struct ModelEntry {
  std::string model_type;
  std::string hf_class;  // the Transformers class reproduced
  std::string notes;     // what distinguishes it, for `hfx formats` / docs
  // The task an export runs when the recipe names none (a tasks/task.h name: models sit below tasks).
  std::string default_task;
  std::vector<ModuleKind> modules;  // what make() returns the model with
  std::function<Model(const io::Checkpoint&)> make;
};

const std::vector<ModelEntry>& model_registry();
// Unsupported naming the model_type and the supported ones when there is no entry.
const ModelEntry& find_model(const std::string& model_type);
// nullptr when there is no entry.
const ModelEntry* find_model_entry(const std::string& model_type);
// Reads config.json's model_type and builds the definition (weights stay lazy), errors in the
// context of config.json.
Model load_model(const io::Checkpoint& ckpt);

}  // namespace hfx::models
