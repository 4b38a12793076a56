// `hfx verify --oracle transformers`: the reference side of verify's comparison taken from Transformers
// eager on the source checkpoint rather than from hfx's own model definition, so that hfx's reading of
// an architecture is checked too, not only its writers. Transformers runs in python/
// hfx_transformers_oracle.py (safetensors only, never remote code), started like the other drivers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hfx::pipeline {

// verify's --oracle values: reference (hfx's reference executor on its own definition), transformers
// (Transformers eager; an error when it cannot run), auto (transformers when `python` runs it, else
// the reference with a note saying why not).
bool is_oracle_name(const std::string& name);

// "" when `python` imports torch, transformers and safetensors; else one line saying what is missing,
// e.g. "/usr/bin/python3 has no torch (pip install torch transformers)". Probed once per interpreter.
std::string transformers_oracle_unavailable(const std::string& python);

// "Transformers 5.2.0 (torch 2.9.0), eager, f32", from the probe of `python`.
std::string transformers_oracle_name(const std::string& python);

struct TransformersOracleJob {
  std::filesystem::path model_dir;  // the checkpoint Transformers loads
  std::string hf_class;             // the Transformers class hfx's definition reproduces
  int64_t layers = 0;               // decoder layers (the present.* outputs); 0 for encoders
  std::vector<std::map<std::string, Tensor>> runs;  // one step's inputs, hfx's names
  // Greedy generation (decoders): left-padded prompts, new tokens only, as runtime::generate returns them.
  bool generate = false;
  std::vector<std::vector<int64_t>> prompts;
  int64_t max_new_tokens = 0;
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = 0;
};

struct TransformersOracleResult {
  std::vector<std::map<std::string, Tensor>> outputs;  // per run: logits, present.*, last_hidden_state
  std::vector<std::vector<int64_t>> tokens;            // greedy tokens per prompt
};

// Runs the job through the driver with `python`, its files in `scratch`. Fails ErrorKind::Mismatch with
// Transformers' own last line when it refuses the checkpoint.
TransformersOracleResult run_transformers_oracle(const std::string& python, const TransformersOracleJob& job,
                                                 const std::filesystem::path& scratch);

}  // namespace hfx::pipeline
