#include "core/safe_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/progress.h"

namespace fs = std::filesystem;

namespace hfx {

bool path_is_within(const fs::path& root, const fs::path& p) {
  auto [r, _] = std::mismatch(root.begin(), root.end(), p.begin(), p.end());
  return r == root.end();
}

bool in_hub_snapshot_blobs(const fs::path& real_root, const fs::path& real) {
  const fs::path snapshots = real_root.parent_path(), repo = snapshots.parent_path();
  return snapshots.filename() == "snapshots" && repo.filename().string().starts_with("models--") &&
         path_is_within(repo / "blobs", real);
}

void check_file_inside(const fs::path& root, const fs::path& path, std::string_view what) {
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (ec) bad_input("{}: {} does not exist", path.string(), what);
  const fs::path real_root = fs::canonical(root, ec);
  if (ec) bad_input("{}: no such folder", root.string());
  if (!path_is_within(real_root, real) && !in_hub_snapshot_blobs(real_root, real))
    bad_input("{}: {} resolves to {}, outside {}", path.string(), what, real.string(), root.string());
  if (!fs::is_regular_file(fs::status(real, ec)))
    bad_input("{}: {} is not a regular file", path.string(), what);
}

fs::path file_inside(const fs::path& root, const std::string& rel, std::string_view what) {
  const fs::path p(rel);
  if (rel.empty() || p.is_absolute() || rel.find('\0') != std::string::npos)
    bad_input("{}: {} `{}` is not a relative path inside the folder", root.string(), what, rel);
  for (const auto& part : p)
    if (part == "..") bad_input("{}: {} `{}` leaves the folder", root.string(), what, rel);
  const fs::path joined = root / p;
  check_file_inside(root, joined, what);
  return joined;
}

int open_regular_file(const fs::path& path, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(ErrorKind::Io, "{}: cannot open: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorKind::Io, "{}: not a regular file", path.string());
  }
  // Reads below block as usual (regular files ignore O_NONBLOCK, but clear it all the same).
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (size) *size = uint64_t(st.st_size);
  return fd;
}

std::string read_file_capped(const fs::path& path, uint64_t max_bytes) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, &size);
  if (size > max_bytes) {
    ::close(fd);
    bad_input("{}: {} is larger than hfx reads for this file ({})", path.string(), human_bytes(int64_t(size)),
              human_bytes(int64_t(max_bytes)));
  }
  std::string text(size_t(size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail(ErrorKind::Io, "{}: read error: {}", path.string(), std::strerror(err));
    }
    if (n == 0) break;  // shrank while reading: take what is there
    done += size_t(n);
  }
  ::close(fd);
  text.resize(done);
  return text;
}

}  // namespace hfx
