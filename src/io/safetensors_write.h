// Writes tensors to a .safetensors file (the tool's own I/O for `hfx run`: inputs and outputs that
// the Python tests read with the `safetensors` package).
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace hfx::io {

void write_safetensors(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors);
// Reads every tensor of a file into memory (for small files such as run inputs).
std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& path);

}  // namespace hfx::io
