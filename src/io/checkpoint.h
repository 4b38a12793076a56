// A Hugging Face model folder opened for export: config.json, the optional generation_config.json,
// and the safetensors weights (sharded with model.safetensors.index.json, or model.safetensors, or
// every *.safetensors file). Pickled weights are refused, never read: unpickling runs code.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "io/json_fields.h"
#include "io/safetensors.h"

namespace hfx::io {

class Checkpoint {
 public:
  // BadInput for a missing folder or config.json, pickle-only weights, or any inconsistency between
  // the index, the shards and their headers.
  static Checkpoint open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const JsonFile& config() const { return config_; }
  const std::optional<JsonFile>& generation_config() const { return generation_config_; }
  // config.json "model_type" (BadInput when missing or not a string).
  std::string model_type() const;

  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* find(std::string_view name) const;
  // BadInput "missing tensor X (expected by the model definition) in <dir>".
  const TensorEntry& get(std::string_view name) const;

  // Weight files in the order they were read (shard names sorted).
  const std::vector<std::filesystem::path>& weight_files() const { return weight_files_; }
  // Existing files to carry into an export: config.json, generation_config.json, tokenizer.json,
  // tokenizer_config.json, special_tokens_map.json, vocab.txt, vocab.json, merges.txt,
  // tokenizer.model, added_tokens.json, chat_template.jinja (in that order).
  const std::vector<std::filesystem::path>& side_files() const { return side_files_; }
  int64_t total_weight_bytes() const;

  // Weight accounting, so an export can report checkpoint tensors the model definition never read.
  // Thread-safe; const because reading weights does not change the checkpoint.
  void mark_used(std::string_view name) const;
  std::vector<std::string> unused() const;  // sorted

 private:
  Checkpoint() = default;
  static Checkpoint open_folder(const std::filesystem::path& dir);
  std::filesystem::path dir_;
  JsonFile config_;
  std::optional<JsonFile> generation_config_;
  std::map<std::string, TensorEntry> tensors_;
  std::vector<std::filesystem::path> weight_files_;
  std::vector<std::filesystem::path> side_files_;
  mutable std::set<std::string, std::less<>> used_;
  mutable std::unique_ptr<std::mutex> used_mutex_ = std::make_unique<std::mutex>();
};

}  // namespace hfx::io
