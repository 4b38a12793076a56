// What a model definition tells the layers above about itself, beside its graph: a typed summary
// (for `inspect`, the manifest and client configs such as genai_config.json) and its key/value cache
// geometry. Plain data in ir/ so that a format reads these facts without depending on models/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hfx::ir {

struct CacheGeometry {
  int64_t num_layers = 0, num_kv_heads = 0, head_dim = 0;
  std::vector<int64_t> sliding_window;  // per layer, 0 = full attention
};

struct ModelSummary {
  std::string model_type;
  std::string hf_class;  // the Transformers class this definition reproduces
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0;
  std::vector<std::pair<std::string, std::string>> features;  // ("rope", "llama3"), ("qk_norm", "yes")
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

}  // namespace hfx::ir
