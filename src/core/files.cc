#include "core/files.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <vector>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/mapped_file.h"

namespace fs = std::filesystem;

namespace hfx {

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "{}: cannot open: {}", path.string(), std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) fail(ErrorKind::Io, "{}: cannot write", path.string());
}

std::string sha256_file(const fs::path& path) {
  // Read in chunks rather than map: hashing a multi-GB artifact must not count its pages in our RSS.
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail(ErrorKind::Io, "{}: cannot open: {}", path.string(), std::strerror(errno));
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<unsigned char> buf(size_t(4) << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) EVP_DigestUpdate(ctx, buf.data(), n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  EVP_DigestFinal_ex(ctx, digest.data(), &len);
  EVP_MD_CTX_free(ctx);
  if (failed) fail(ErrorKind::Io, "{}: read error", path.string());
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

StagedDirectory::StagedDirectory(fs::path final_path, bool overwrite) : final_(std::move(final_path)) {
  if (fs::exists(final_) && !overwrite)
    bad_input("{}: output exists (pass --overwrite to replace it)", final_.string());
  fs::path parent = final_.parent_path().empty() ? fs::path(".") : final_.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail(ErrorKind::Io, "{}: cannot create: {}", parent.string(), ec.message());
  staging_ = parent / ("." + final_.filename().string() + ".hfx-partial-" + std::to_string(::getpid()));
  fs::remove_all(staging_, ec);
  fs::create_directory(staging_, ec);
  if (ec) fail(ErrorKind::Io, "{}: cannot create: {}", staging_.string(), ec.message());
}

StagedDirectory::~StagedDirectory() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
}

void StagedDirectory::commit() {
  std::error_code ec;
  // Move the old artifact aside first so that the final rename is a single atomic step, then drop it.
  fs::path old = staging_.string() + ".old";
  bool had_old = fs::exists(final_);
  if (had_old) {
    fs::rename(final_, old, ec);
    if (ec) fail(ErrorKind::Io, "{}: cannot replace: {}", final_.string(), ec.message());
  }
  fs::rename(staging_, final_, ec);
  if (ec) {
    if (had_old) fs::rename(old, final_);
    fail(ErrorKind::Io, "{}: cannot rename into place: {}", final_.string(), ec.message());
  }
  committed_ = true;
  if (had_old) fs::remove_all(old, ec);
}

}  // namespace hfx
