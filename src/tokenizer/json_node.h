// A value of tokenizer.json with its path, for errors that name the field. Its own file so that the
// stages (normalizers.cc, models.cc, ...) and tokenizer.cc, which calls their factories, both sit on it
// rather than on each other.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "io/json_fields.h"

namespace hfx::tokenizer {

using nlohmann::json;
using io::JsonFile;

// One value of tokenizer.json with its path ("pre_tokenizer.pretokenizers[1].pattern") for errors:
//   tokenizer.json: field "model.merges[3]": expected a string "a b" or a pair, found 7
class Node {
 public:
  Node(const JsonFile& file, const json* value, std::string path)
      : file_(&file), value_(value), path_(std::move(path)) {}

  bool present() const { return value_ && !value_->is_null(); }
  const json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  const JsonFile& file() const { return *file_; }

  Node operator[](std::string_view key) const;  // absent child when this is not an object
  Node operator[](size_t index) const;

  std::string str() const;                          // required string
  std::string str_or(std::string_view def) const;   // absent -> def
  bool boolean_or(bool def) const;
  int64_t integer(int64_t min = 0, int64_t max = INT64_MAX) const;
  std::optional<int64_t> integer_opt(int64_t min = 0, int64_t max = INT64_MAX) const;
  char32_t single_char() const;  // a string of exactly one character
  const json& object() const;    // required object
  const json& array() const;     // required array
  std::string type() const;      // required "type" string of a component object

  [[noreturn]] void wrong(std::string_view expected) const;
  [[noreturn]] void unsupported_value(std::string_view what) const;

 private:
  const JsonFile* file_;
  const json* value_;
  std::string path_;
};

}  // namespace hfx::tokenizer
