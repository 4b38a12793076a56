// Rotary position embedding parameters, parsed from config.json the way Transformers reads them
// (`rope_parameters` in v5 files, `rope_scaling` + `rope_theta` in v4 files), and the inverse
// frequencies each rope type computes (modeling_rope_utils.py: default, linear, dynamic, yarn, llama3).
#pragma once

#include <string>
#include <vector>

#include "io/json_fields.h"

namespace hfx::models {

struct RopeSpec {
  std::string type = "default";  // default | linear | dynamic | yarn | llama3
  double theta = 10000.0;
  int64_t rotary_dim = 0;         // head_dim * partial_rotary_factor
  std::vector<float> inv_freq;    // [rotary_dim / 2], at the original context length
  double attention_scaling = 1.0; // multiplies cos and sin (yarn)
  // dynamic NTK: inv_freq is recomputed in the graph from the longest position (see RopeCosSin).
  bool dynamic = false;
  double factor = 1.0;
  int64_t max_position_embeddings = 0;
};

// Reads the rope fields of `config` (top level object of config.json).
RopeSpec parse_rope(const io::JsonFile& config, int64_t head_dim, int64_t max_position_embeddings);

}  // namespace hfx::models
