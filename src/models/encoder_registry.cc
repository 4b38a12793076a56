#include "models/encoder.h"

namespace hfx::models {

const std::vector<EncoderEntry>& encoder_registry() {
  static const std::vector<EncoderEntry> entries = {};
  return entries;
}

const EncoderEntry* find_encoder(const std::string& model_type) {
  for (const auto& e : encoder_registry())
    if (e.model_type == model_type) return &e;
  return nullptr;
}

}  // namespace hfx::models
