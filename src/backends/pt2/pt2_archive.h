// A torch `.pt2` archive as PyTorchStreamReader reads it: a zip whose entries all sit under one root
// folder, stored (not compressed), zip64 when large, written by libzip. Tensors are added as sources
// that produce their bytes when the archive is written, one tensor at a time: a stored checkpoint
// tensor is copied straight from its mapping, a cast or transposed one converted a few MiB of rows at a
// time as libzip reads it, and only other transforms hold a whole tensor.
#pragma once

#include <zip.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>

#include "ir/weight.h"

namespace hfx::pt2_backend {

class Pt2Archive {
 public:
  // Creates `file` (which must not exist); entries are named `root/<name>`.
  Pt2Archive(std::filesystem::path file, std::string root);
  ~Pt2Archive();  // discards an archive that was not closed
  Pt2Archive(const Pt2Archive&) = delete;
  Pt2Archive& operator=(const Pt2Archive&) = delete;

  void add_text(const std::string& name, std::string text);
  // `on_written(bytes)` runs once the tensor's bytes are in the archive.
  void add_tensor(const std::string& name, const ir::WeightRef& weight, std::function<void(int64_t)> on_written = {});
  // Writes the archive; Io error naming the file (or the tensor whose bytes failed).
  void close();

 private:
  void add(const std::string& name, zip_source_t* source);
  std::filesystem::path file_;
  std::string root_;
  zip_t* zip_ = nullptr;
  std::vector<std::unique_ptr<std::string>> texts_;  // alive until close: libzip reads them then
  std::exception_ptr source_error_;
};

}  // namespace hfx::pt2_backend
