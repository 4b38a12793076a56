// Typed reads of JSON fields (config.json, generation_config.json, index files) with one-line
// BadInput errors that name the file, the field, what was expected and what was found:
//   config.json: field "num_attention_heads": expected a positive integer, found "abc"
// A field set to null counts as absent: Hugging Face configs write null for "not used".
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/safe_path.h"
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hfx::io {

struct JsonFile {
  std::filesystem::path path;
  nlohmann::json json;  // always an object

  // Io when the file cannot be read; BadInput when it is not JSON or its top level is not an object.
  static JsonFile load(const std::filesystem::path& path, uint64_t max_bytes = kMaxConfigBytes);
};

// JSON nesting hfx accepts from user files. nlohmann parses iteratively, but printing, copying and
// comparing values recurse, so a document of 100000 nested arrays would overflow the stack later.
constexpr int kMaxJsonDepth = 512;

// BadInput "<where>: JSON nested deeper than 512 levels" when brackets outside strings nest deeper
// than max_depth. A linear pre-scan to run before parsing text from a user file.
void check_json_depth(std::string_view text, const std::string& where, int max_depth = kMaxJsonDepth);

// Integers must lie in [min, max]. Integral floats (4.0) are accepted, as Python writes them.
int64_t require_int(const JsonFile& file, const nlohmann::json& obj, std::string_view key,
                    int64_t min = 1, int64_t max = INT64_MAX);
std::optional<int64_t> optional_int(const JsonFile& file, const nlohmann::json& obj,
                                    std::string_view key, int64_t min = 1,
                                    int64_t max = INT64_MAX);
// Finite numbers only: NaN, Inf, strings and booleans are rejected.
double require_number(const JsonFile& file, const nlohmann::json& obj, std::string_view key);
std::optional<double> optional_number(const JsonFile& file, const nlohmann::json& obj,
                                      std::string_view key);
std::optional<bool> optional_bool(const JsonFile& file, const nlohmann::json& obj,
                                  std::string_view key);
std::string require_string(const JsonFile& file, const nlohmann::json& obj, std::string_view key);
std::optional<std::string> optional_string(const JsonFile& file, const nlohmann::json& obj,
                                           std::string_view key);
// A single value or a list of them, always returned as a list (eos_token_id: 2 or [2, 32000]).
std::optional<std::vector<int64_t>> optional_int_list(const JsonFile& file,
                                                      const nlohmann::json& obj,
                                                      std::string_view key, int64_t min = 1,
                                                      int64_t max = INT64_MAX);
std::optional<std::vector<std::string>> optional_string_list(const JsonFile& file,
                                                             const nlohmann::json& obj,
                                                             std::string_view key);
// A nested object such as "rope_scaling"; nullptr when absent or null.
const nlohmann::json* optional_object(const JsonFile& file, const nlohmann::json& obj,
                                      std::string_view key);

}  // namespace hfx::io
