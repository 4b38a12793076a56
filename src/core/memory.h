// What the machine has: the memory a process may still use without swapping.
#pragma once

#include <cstdint>
#include <optional>

namespace hfx {

// MemAvailable of /proc/meminfo in bytes, or nullopt where there is none.
std::optional<int64_t> available_memory_bytes();

}  // namespace hfx
