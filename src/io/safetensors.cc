#include "io/safetensors.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>

#include "core/error.h"
#include "io/json_fields.h"

namespace hfx::io {

using nlohmann::json;

namespace {

// Real headers are a few MB at most; a larger length means the file is not safetensors at all, and
// parsing it would only waste memory.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Valid safetensors dtypes for which hfx has no DType: the file is fine, hfx is not.
bool is_unsupported_dtype(std::string_view s) {
  for (std::string_view t : {"U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3",
                             "F6_E3M2", "F4", "C64"})
    if (s == t) return true;
  return false;
}

std::string brief(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Keys in a whole header (a tensor has four: its name, dtype, shape, data_offsets), so at most 262144
// tensors per file; real files have hundreds to a few tens of thousands. The cap bounds the parsed
// document (about 900 bytes per tensor through the checkpoint) to about 250 MB whatever 100 MB of
// JSON holds.
constexpr size_t kMaxHeaderKeys = size_t(1) << 20;

// nlohmann's DOM builder with two checks on the way: a key repeated within one object (nlohmann
// keeps only the last one, which for a repeated tensor name would silently hide a tensor), and the
// key cap. A SAX wrapper rather than a parse callback: the callback parser rescans the parent object
// after every child object, which is quadratic in the number of tensors.
class HeaderSax {
 public:
  explicit HeaderSax(json& out) : dom_(out, /*allow_exceptions=*/true) {}
  std::optional<std::string> duplicate;
  bool duplicate_is_tensor = false;
  bool too_many_keys = false;

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const std::string& s) { return dom_.number_float(v, s); }
  bool string(std::string& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    open_.emplace_back();
    return dom_.start_object(n);
  }
  bool key(std::string& k) {
    if (++keys_ > kMaxHeaderKeys) {
      too_many_keys = true;
      return false;  // stops the parser
    }
    if (!duplicate && !open_.back().insert(k).second) {
      duplicate = k;
      duplicate_is_tensor = open_.size() == 1;
    }
    return dom_.key(k);
  }
  bool end_object() {
    open_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return dom_.start_array(n); }
  bool end_array() { return dom_.end_array(); }
  template <class Exception>
  bool parse_error(std::size_t pos, const std::string& token, const Exception& e) {
    return dom_.parse_error(pos, token, e);  // throws
  }

 private:
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<std::set<std::string>> open_;
  size_t keys_ = 0;
};

json parse_header(const std::string& where, const uint8_t* bytes, size_t n) {
  json header;
  const char* text = reinterpret_cast<const char*>(bytes);
  check_json_depth(std::string_view(text, n), where + ": header");
  HeaderSax sax(header);
  try {
    json::sax_parse(text, text + n, &sax);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large for a double
    std::string_view what = e.what();  // drop nlohmann's "[json.exception.parse_error.101] "
    if (auto p = what.find("] "); p != std::string_view::npos) what.remove_prefix(p + 2);
    bad_input("{}: header is not valid JSON: {}", where, what);
  }
  if (sax.too_many_keys)
    bad_input("{}: header has more than {} keys (about {} tensors); not a checkpoint hfx can hold", where,
              kMaxHeaderKeys, kMaxHeaderKeys / 4);
  if (sax.duplicate && sax.duplicate_is_tensor)
    bad_input("{}: tensor {} is listed twice in the header", where, *sax.duplicate);
  if (sax.duplicate) bad_input("{}: header repeats the key \"{}\" within one object", where, *sax.duplicate);
  return header;
}

[[noreturn]] void bad_tensor(const std::string& where, const std::string& name,
                             const std::string& msg) {
  bad_input("{}: tensor {}: {}", where, name, msg);
}

std::map<std::string, std::string> parse_metadata(const std::string& where, const json& meta) {
  if (!meta.is_object())
    bad_input("{}: __metadata__: expected an object of strings, found {}", where, brief(meta));
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string())
      bad_input("{}: __metadata__ \"{}\": expected a string, found {}", where, key, brief(value));
    out[key] = value.get<std::string>();
  }
  return out;
}

TensorEntry parse_entry(const std::string& where, const std::string& name, const json& info,
                        const std::shared_ptr<const MappedFile>& file, uint64_t data_start,
                        uint64_t data_size) {
  auto fail_tensor = [&](const std::string& msg) { bad_tensor(where, name, msg); };
  if (!info.is_object())
    fail_tensor(fmt::format("expected an object with dtype, shape and data_offsets, found {}",
                            brief(info)));
  auto field = [&](const char* key) -> const json& {
    auto it = info.find(key);
    if (it == info.end()) fail_tensor(fmt::format("missing \"{}\"", key));
    return *it;
  };

  const json& dtype_json = field("dtype");
  if (!dtype_json.is_string())
    fail_tensor(fmt::format("dtype: expected a string, found {}", brief(dtype_json)));
  const std::string dtype_text = dtype_json.get<std::string>();
  std::optional<DType> dtype = dtype_from_safetensors(dtype_text);
  if (!dtype && is_unsupported_dtype(dtype_text))
    unsupported("{}: tensor {}: dtype {} is not supported by hfx", where, name, dtype_text);
  if (!dtype)
    fail_tensor(fmt::format(
        "unknown dtype \"{}\" (expected one of F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL)",
        dtype_text));

  const json& shape_json = field("shape");
  std::vector<int64_t> shape;
  bool shape_ok = shape_json.is_array();
  for (size_t i = 0; shape_ok && i < shape_json.size(); ++i) {
    const json& d = shape_json[i];
    shape_ok = d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(INT64_MAX);
    if (shape_ok) shape.push_back(d.get<int64_t>());
  }
  if (!shape_ok)
    fail_tensor(fmt::format("shape: expected a list of non-negative integers, found {}",
                            brief(shape_json)));
  uint64_t needed = dtype_size(*dtype);
  for (int64_t d : shape)
    if (__builtin_mul_overflow(needed, uint64_t(d), &needed))
      fail_tensor(fmt::format("shape {} is too large: its byte size overflows 64 bits",
                              shape_text(shape)));

  const json& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    fail_tensor(fmt::format("data_offsets: expected two non-negative integers [begin, end], found {}",
                            brief(offsets)));
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  if (begin > end)
    fail_tensor(fmt::format("data_offsets [{}, {}]: begin is after end", begin, end));
  if (end > data_size)
    fail_tensor(fmt::format("data ends at byte {} but the file's data section has only {} bytes",
                            end, data_size));
  if (end - begin != needed)
    fail_tensor(fmt::format("shape {} of {} needs {} bytes, data_offsets give {}",
                            shape_text(shape), dtype_text, needed, end - begin));
  return TensorEntry{name, *dtype, std::move(shape), file, size_t(data_start + begin),
                     size_t(needed)};
}

// Overlapping ranges would alias two weights. Gaps and trailing bytes are harmless and allowed.
void check_overlaps(const std::string& where, const std::vector<TensorEntry>& tensors) {
  std::vector<const TensorEntry*> by_offset;
  for (const auto& t : tensors)
    if (t.nbytes > 0) by_offset.push_back(&t);  // empty tensors occupy no bytes
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  const TensorEntry* furthest = nullptr;  // the earlier tensor that ends last
  for (const TensorEntry* t : by_offset) {
    if (furthest && t->offset < furthest->offset + furthest->nbytes)
      bad_input("{}: tensors {} and {} overlap in the data section", where, furthest->name,
                t->name);
    if (!furthest || t->offset + t->nbytes > furthest->offset + furthest->nbytes) furthest = t;
  }
}

}  // namespace

SafetensorsFile read_safetensors(std::shared_ptr<const MappedFile> file) {
  const std::string where = file->path().string();
  const uint64_t size = file->size();
  if (size < 8)
    bad_input("{}: file is {} bytes, too short for a safetensors header (8-byte length, then JSON)",
              where, size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file->data()[i];  // little-endian on any host
  if (n > kMaxHeaderBytes)
    bad_input("{}: header length {} exceeds the 100 MB limit; not a safetensors file?", where, n);
  if (n > size - 8)
    bad_input("{}: header length {} runs past the end of the file ({} bytes)", where, n, size);

  json header = parse_header(where, file->data() + 8, n);
  if (!header.is_object())
    bad_input("{}: header: expected a JSON object, found {}", where, header.type_name());

  SafetensorsFile out;
  const uint64_t data_start = 8 + n, data_size = size - data_start;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__")
      out.metadata = parse_metadata(where, info);
    else
      out.tensors.push_back(parse_entry(where, name, info, file, data_start, data_size));
  }
  check_overlaps(where, out.tensors);
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.name < b.name; });
  return out;
}

}  // namespace hfx::io
