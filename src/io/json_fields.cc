#include "io/json_fields.h"

#include <cmath>

#include "core/error.h"
#include "core/files.h"

namespace hfx::io {

using nlohmann::json;

namespace {

// The found value as the user wrote it, cut short so the message stays one readable line.
std::string found_str(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

[[noreturn]] void wrong(const JsonFile& f, std::string_view key, std::string_view expected,
                        const json& found) {
  bad_input("{}: field \"{}\": expected {}, found {}", f.path.string(), key, expected,
            found_str(found));
}

// nullptr when the key is absent or null.
const json* lookup(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

const json& required(const JsonFile& f, const json& obj, std::string_view key,
                     std::string_view expected) {
  auto it = obj.find(key);
  if (it == obj.end()) bad_input("{}: field \"{}\": missing (expected {})", f.path.string(), key, expected);
  return *it;
}

// "positive integer", "integers in [0, 7]", ... for the expected-vs-found part of messages.
std::string int_kind(int64_t min, int64_t max, bool plural = false) {
  std::string noun = plural ? "integers" : "integer";
  if (max != INT64_MAX) return fmt::format("{} in [{}, {}]", noun, min, max);
  if (min == 1) return "positive " + noun;
  if (min == 0) return "non-negative " + noun;
  if (min == INT64_MIN) return noun;
  return fmt::format("{} >= {}", noun, min);
}

std::string int_expectation(int64_t min, int64_t max) {
  std::string kind = int_kind(min, max);
  return (kind[0] == 'i' ? "an " : "a ") + kind;
}

std::optional<int64_t> as_int(const json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) return std::nullopt;
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    // 2^63 itself is out of range; every double below it converts exactly.
    if (std::isfinite(d) && d == std::floor(d) && d >= -9223372036854775808.0 &&
        d < 9223372036854775808.0)
      return int64_t(d);
  }
  return std::nullopt;
}

int64_t int_value(const JsonFile& f, const json& v, std::string_view key, int64_t min, int64_t max) {
  auto i = as_int(v);
  if (!i || *i < min || *i > max) wrong(f, key, int_expectation(min, max), v);
  return *i;
}

double number_value(const JsonFile& f, const json& v, std::string_view key) {
  // is_number() excludes booleans in nlohmann::json.
  if (!v.is_number() || !std::isfinite(v.get<double>())) wrong(f, key, "a finite number", v);
  return v.get<double>();
}

}  // namespace

void check_json_depth(std::string_view text, const std::string& where, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        bad_input("{}: JSON nested deeper than {} levels (at byte {})", where, max_depth, i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

JsonFile JsonFile::load(const std::filesystem::path& path, uint64_t max_bytes) {
  std::string text = read_text_file(path, max_bytes);
  check_json_depth(text, path.string());
  JsonFile f{path, {}};
  try {
    f.json = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large for a double
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix; the rest says where and why.
    std::string_view what = e.what();
    if (auto p = what.find("] "); p != std::string_view::npos) what.remove_prefix(p + 2);
    bad_input("{}: not valid JSON: {}", path.string(), what);
  }
  if (!f.json.is_object())
    bad_input("{}: expected a JSON object at the top level, found {}", path.string(),
              f.json.type_name());
  return f;
}

int64_t require_int(const JsonFile& f, const json& obj, std::string_view key, int64_t min,
                    int64_t max) {
  return int_value(f, required(f, obj, key, int_expectation(min, max)), key, min, max);
}

std::optional<int64_t> optional_int(const JsonFile& f, const json& obj, std::string_view key,
                                    int64_t min, int64_t max) {
  const json* v = lookup(obj, key);
  if (!v) return std::nullopt;
  return int_value(f, *v, key, min, max);
}

double require_number(const JsonFile& f, const json& obj, std::string_view key) {
  return number_value(f, required(f, obj, key, "a finite number"), key);
}

std::optional<double> optional_number(const JsonFile& f, const json& obj, std::string_view key) {
  const json* v = lookup(obj, key);
  if (!v) return std::nullopt;
  return number_value(f, *v, key);
}

std::optional<bool> optional_bool(const JsonFile& f, const json& obj, std::string_view key) {
  const json* v = lookup(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong(f, key, "true or false", *v);
  return v->get<bool>();
}

std::string require_string(const JsonFile& f, const json& obj, std::string_view key) {
  const json& v = required(f, obj, key, "a string");
  if (!v.is_string()) wrong(f, key, "a string", v);
  return v.get<std::string>();
}

std::optional<std::string> optional_string(const JsonFile& f, const json& obj, std::string_view key) {
  const json* v = lookup(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong(f, key, "a string", *v);
  return v->get<std::string>();
}

std::optional<std::vector<int64_t>> optional_int_list(const JsonFile& f, const json& obj,
                                                      std::string_view key, int64_t min,
                                                      int64_t max) {
  const json* v = lookup(obj, key);
  if (!v) return std::nullopt;
  std::string expected =
      fmt::format("{} or a list of {}", int_expectation(min, max), int_kind(min, max, true));
  auto check = [&](const json& e) {
    auto i = as_int(e);
    if (!i || *i < min || *i > max) wrong(f, key, expected, *v);
    return *i;
  };
  if (!v->is_array()) return std::vector<int64_t>{check(*v)};
  std::vector<int64_t> out;
  for (const json& e : *v) out.push_back(check(e));
  return out;
}

std::optional<std::vector<std::string>> optional_string_list(const JsonFile& f, const json& obj,
                                                             std::string_view key) {
  const json* v = lookup(obj, key);
  if (!v) return std::nullopt;
  if (v->is_string()) return std::vector<std::string>{v->get<std::string>()};
  if (!v->is_array()) wrong(f, key, "a string or a list of strings", *v);
  std::vector<std::string> out;
  for (const json& e : *v) {
    if (!e.is_string()) wrong(f, key, "a string or a list of strings", *v);
    out.push_back(e.get<std::string>());
  }
  return out;
}

const json* optional_object(const JsonFile& f, const json& obj, std::string_view key) {
  const json* v = lookup(obj, key);
  if (v && !v->is_object()) wrong(f, key, "an object", *v);
  return v;
}

}  // namespace hfx::io
