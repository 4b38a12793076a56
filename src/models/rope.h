// Rotary position embedding parameters, parsed from config.json the way Transformers reads them
// (`rope_parameters` in v5 files, `rope_scaling` + `rope_theta` in v4 files), and the inverse
// frequencies each rope type computes (modeling_rope_utils.py: default, linear, dynamic, yarn, llama3,
// longrope).
#pragma once

#include <string>
#include <vector>

#include "io/json_fields.h"

namespace hfx::models {

struct RopeSpec {
  std::string type = "default";  // default | linear | dynamic | yarn | llama3 | longrope
  double theta = 10000.0;
  int64_t rotary_dim = 0;         // head_dim * partial_rotary_factor
  std::vector<float> inv_freq;    // [rotary_dim / 2], at the original context length
  double attention_scaling = 1.0; // multiplies cos and sin (yarn)
  // dynamic NTK: inv_freq is recomputed in the graph from the longest position (see RopeCosSin).
  bool dynamic = false;
  double factor = 1.0;
  int64_t max_position_embeddings = 0;
  // longrope (Phi-3): inv_freq uses short_factor; once the longest position reaches
  // original_max_position_embeddings the step uses long_inv_freq instead (chosen in the graph).
  std::vector<float> long_inv_freq;
  int64_t original_max_position_embeddings = 0;
};

// Family defaults for configs that omit a field (the config class's own defaults).
struct RopeDefaults {
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
  bool yarn_is_longrope = false;  // Phi-3 reads rope_type "yarn" (and "su") as longrope
};

// Reads the rope fields of `config` (top level object of config.json).
RopeSpec parse_rope(const io::JsonFile& config, int64_t head_dim, int64_t max_position_embeddings,
                    const RopeDefaults& defaults = {});
// One rope parameter set: `params` is rope_parameters, rope_scaling or one layer type's nested entry;
// `theta` is used when params has no rope_theta.
RopeSpec parse_rope_params(const io::JsonFile& config, const nlohmann::json& params, double theta,
                           int64_t head_dim, int64_t max_position_embeddings, const RopeDefaults& defaults = {});

}  // namespace hfx::models
