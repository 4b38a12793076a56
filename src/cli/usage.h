// Usage errors: the command line itself is wrong (a flag's value out of its range, a flag that does
// not apply, another tool's spelling). main() prints them as one line and exits 2, as it does for
// CLI11's parse errors; exit 1 stays for what the inputs are (files, a model, an export).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

#include "core/error.h"

namespace hfx::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void usage_error(fmt::format_string<Args...> format, Args&&... args) {
  throw UsageError(fmt::format(format, std::forward<Args>(args)...));
}

// Runs `body`, a check of flag values written for every caller (a recipe file too, where a bad value
// is bad input); a BadInput it throws is the command line's mistake here, so it becomes a UsageError
// with the same words.
template <typename Body>
auto as_usage(Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput) throw;
    throw UsageError(e.describe());
  }
}

}  // namespace hfx::cli
