#include "runtime/tested_runtimes.h"

#include <fmt/format.h>

#include <mutex>
#include <set>

namespace hfx::runtime {

std::optional<std::string> untested_runtime_warning(const std::string& runtime, const std::string& found,
                                                    const std::string& tested) {
  // "2026.4.1" matches "2026.4.1" and "2026.4.1-22982-e213a14..." but not "2026.4.10".
  if (found.starts_with(tested) && (found.size() == tested.size() || !std::isdigit(static_cast<unsigned char>(found[tested.size()]))))
    return std::nullopt;
  return fmt::format("{} {} is not the version hfx was tested with ({}); results may differ", runtime, found, tested);
}

void warn_if_untested(const std::string& runtime, const std::string& found, const std::string& tested) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  auto message = untested_runtime_warning(runtime, found, tested);
  if (!message) return;
  std::lock_guard lock(mutex);
  if (warned.insert(runtime).second) fmt::print(stderr, "hfx: warning: {}\n", *message);
}

}  // namespace hfx::runtime
