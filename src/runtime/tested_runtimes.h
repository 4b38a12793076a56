// The runtime versions hfx's artifacts are tested on (tests/oracle; requirements-test.txt pins them).
// Another version is allowed: hfx warns, since the fused ops and numerics it was checked against may
// differ there, and carries on.
#pragma once

#include <optional>
#include <string>

namespace hfx::runtime {

inline constexpr const char* kTestedOnnxRuntime = "1.31.1";
inline constexpr const char* kTestedOpenVino = "2026.4.1";
inline constexpr const char* kTestedOnnxRuntimeGenai = "0.18.0";
inline constexpr const char* kTestedTorch = "2.13.0";
inline constexpr const char* kTestedExecuTorch = "1.5.1";

// The warning for `found` (a version string, possibly with a build suffix: "2026.4.1-22982-...") of
// `runtime`, or nothing when it is the tested release.
std::optional<std::string> untested_runtime_warning(const std::string& runtime, const std::string& found,
                                                    const std::string& tested);
// Prints that warning to stderr, once per runtime and process.
void warn_if_untested(const std::string& runtime, const std::string& found, const std::string& tested);

}  // namespace hfx::runtime
