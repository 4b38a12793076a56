#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/safe_path.h"

namespace hfx {

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& path) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, &size);  // never blocks on a FIFO; refuses devices
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = size_t(size);
  struct stat st {};
  if (::fstat(fd, &st) == 0) file->identity_ = {uint64_t(st.st_dev), uint64_t(st.st_ino)};
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail(ErrorKind::Io, "{}: cannot map: {}", path.string(), std::strerror(errno));
    }
    file->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return file;
}

void MappedFile::release(size_t offset, size_t size) const {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const size_t begin = (offset + page - 1) / page * page;  // whole pages inside the range only
  const size_t end = std::min(offset + size, size_) / page * page;
  if (data_ && end > begin) ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace hfx
