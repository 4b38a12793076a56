// File helpers: atomic output folders, whole-file reads, hashing.
#pragma once

#include <filesystem>
#include <string>

namespace hfx {

std::string read_text_file(const std::filesystem::path& path);
void write_text_file(const std::filesystem::path& path, const std::string& text);
std::string sha256_file(const std::filesystem::path& path);  // lower-case hex

// An output folder built next to its final place and renamed into it only on commit(). If the
// object is destroyed without commit() (an error, an exception), the partial folder is removed, so a
// failed export leaves nothing behind and a previous artifact at `final` stays intact until the
// rename.
class StagedDirectory {
 public:
  explicit StagedDirectory(std::filesystem::path final_path, bool overwrite);
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::filesystem::path& path() const { return staging_; }
  const std::filesystem::path& final_path() const { return final_; }
  void commit();

 private:
  std::filesystem::path final_;
  std::filesystem::path staging_;
  bool committed_ = false;
};

}  // namespace hfx
