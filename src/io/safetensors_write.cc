#include "io/safetensors_write.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/mapped_file.h"

namespace hfx::io {

namespace {
const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::Bool: return "BOOL";
    case DType::I4: case DType::U4: break;  // safetensors has no 4-bit types
  }
  return "?";
}
}  // namespace

void write_safetensors(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", safetensors_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8) h += ' ';  // keeps the data section 8-byte aligned, as the format advises
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), std::streamsize(h.size()));
  for (const auto& [name, t] : tensors) out.write(reinterpret_cast<const char*>(t.data()), std::streamsize(t.nbytes()));
  if (!out) fail(ErrorKind::Io, "{}: cannot write", path.string());
}

std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& path) {
  auto file = MappedFile::open(path);
  std::map<std::string, Tensor> out;
  for (const auto& e : read_safetensors(file).tensors) {
    Tensor t(e.dtype, e.shape);
    std::memcpy(t.data(), file->data() + e.offset, e.nbytes);
    out.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace hfx::io
