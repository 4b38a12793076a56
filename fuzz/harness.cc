#include "harness.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace hfx::fuzz {

namespace {
fs::path g_scratch;
void remove_scratch() {
  std::error_code ec;
  if (!g_scratch.empty()) fs::remove_all(g_scratch, ec);
}
}  // namespace

const fs::path& scratch() {
  if (g_scratch.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "hfx-fuzz-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    g_scratch = tmpl;
    std::atexit(remove_scratch);
  }
  return g_scratch;
}

void write_file(const fs::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  if (!out) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();
  }
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz harness: cannot read %s\n", path.c_str());
    std::abort();
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path data_dir() {
  if (const char* env = std::getenv("HFX_FUZZ_DATA")) return env;
  return fs::path(HFX_SOURCE_DIR) / "fuzz" / "data";
}

void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "\n==hfx-fuzz== FINDING: %s: %s\n", what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace hfx::fuzz
