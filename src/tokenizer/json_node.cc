// Node, the path-carrying cursor over tokenizer.json that every stage reads its object with.
#include "tokenizer/json_node.h"

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/unicode_tables.h"

namespace hfx::tokenizer {

namespace {
std::string shown(const json* v) {
  if (!v) return "nothing";
  std::string s = v->dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}
}  // namespace

Node Node::operator[](std::string_view key) const {
  std::string child = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  if (!value_ || !value_->is_object()) return Node(*file_, nullptr, child);
  auto it = value_->find(key);
  return Node(*file_, it == value_->end() ? nullptr : &*it, child);
}

Node Node::operator[](size_t index) const {
  std::string child = path_ + "[" + std::to_string(index) + "]";
  if (!value_ || !value_->is_array() || index >= value_->size()) return Node(*file_, nullptr, child);
  return Node(*file_, &(*value_)[index], child);
}

void Node::wrong(std::string_view expected) const {
  if (!value_) bad_input("{}: field \"{}\": missing (expected {})", file_->path.string(), path_, expected);
  bad_input("{}: field \"{}\": expected {}, found {}", file_->path.string(), path_, expected, shown(value_));
}

void Node::unsupported_value(std::string_view what) const {
  unsupported("{}: field \"{}\": {} {} is not supported", file_->path.string(), path_, what, shown(value_));
}

std::string Node::str() const {
  if (!present() || !value_->is_string()) wrong("a string");
  return value_->get<std::string>();
}

std::string Node::str_or(std::string_view def) const { return present() ? str() : std::string(def); }

bool Node::boolean_or(bool def) const {
  if (!present()) return def;
  if (!value_->is_boolean()) wrong("true or false");
  return value_->get<bool>();
}

std::optional<int64_t> Node::integer_opt(int64_t min, int64_t max) const {
  if (!present()) return std::nullopt;
  return integer(min, max);
}

int64_t Node::integer(int64_t min, int64_t max) const {
  std::string expected = max == INT64_MAX ? fmt::format("an integer >= {}", min) : fmt::format("an integer in [{}, {}]", min, max);
  if (!present() || !value_->is_number_integer()) wrong(expected);
  if (value_->is_number_unsigned() && value_->get<uint64_t>() > uint64_t(INT64_MAX)) wrong(expected);
  int64_t v = value_->get<int64_t>();
  if (v < min || v > max) wrong(expected);
  return v;
}

char32_t Node::single_char() const {
  std::u32string s;
  std::string v = str();
  if (!unicode::decode_utf8(v, s) || s.size() != 1) wrong("a single character");
  return s[0];
}

const json& Node::object() const {
  if (!present() || !value_->is_object()) wrong("an object");
  return *value_;
}

const json& Node::array() const {
  if (!present() || !value_->is_array()) wrong("a list");
  return *value_;
}

std::string Node::type() const {
  if (!present() || !value_->is_object()) wrong("an object with a \"type\"");
  return (*this)["type"].str();
}

}  // namespace hfx::tokenizer
