// A read-only memory map of a whole file. Weights are read through it without copies; pages the
// export never touches are never read from disk.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

namespace hfx {

class MappedFile {
 public:
  // Throws Io naming the path when the file cannot be opened or mapped.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // The file itself (device and inode), whatever path or map reached it: two opens of one file match.
  struct Identity {
    uint64_t device = 0, inode = 0;
    auto operator<=>(const Identity&) const = default;
  };
  const Identity& identity() const { return identity_; }
  // Tells the kernel this process is done with [offset, offset + size) for now: the pages leave our
  // resident set (they stay in the page cache and fault back in if read again).
  void release(size_t offset, size_t size) const;

 private:
  MappedFile() = default;
  std::filesystem::path path_;
  Identity identity_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hfx
