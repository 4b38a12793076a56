#include "core/memory.h"

#include <fstream>
#include <string>

namespace hfx {

std::optional<int64_t> available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("MemAvailable:")) return std::stoll(line.substr(13)) * 1024;  // "MemAvailable:  N kB"
  return std::nullopt;
}

}  // namespace hfx
