// Strict, zero-copy reader of the safetensors format: an 8-byte little-endian header length N, N
// bytes of JSON {"__metadata__": {str: str}, "<name>": {"dtype", "shape", "data_offsets"}}, then
// the data section that data_offsets index into. Every check failure is a one-line BadInput naming
// the file (and tensor); nothing is copied, entries point into the memory map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace hfx::io {

struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::shared_ptr<const MappedFile> file;  // keeps the map alive as long as the entry
  size_t offset = 0;  // absolute byte offset in the file; not necessarily aligned to the element size
  size_t nbytes = 0;  // == numel(shape) * dtype_size(dtype)

  const uint8_t* data() const { return file->data() + offset; }
};

struct SafetensorsFile {
  std::vector<TensorEntry> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
};

SafetensorsFile read_safetensors(std::shared_ptr<const MappedFile> file);

}  // namespace hfx::io
