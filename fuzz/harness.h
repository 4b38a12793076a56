// Shared helpers of the libFuzzer targets (fuzz/fuzz_*.cc). Each target feeds its input to one
// parser of user files through the same entry points the CLI uses, and holds hfx to its contract:
// hostile input may only ever raise hfx::Error of a user-facing kind (bad input, unsupported, i/o).
// Anything else is a finding and aborts: a crash or sanitizer report, an exception of another type
// (an uncaught nlohmann/std exception would be "internal error", exit 70, in the CLI), an
// hfx::Error of kind Internal (a failed HFX_CHECK: validation is missing upstream), or a broken
// invariant the target checks after a successful parse.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/error.h"

namespace hfx::fuzz {

// A private scratch folder for this process (created on first use, removed at exit).
const std::filesystem::path& scratch();

// Writes bytes to a file, replacing it.
void write_file(const std::filesystem::path& path, const uint8_t* data, size_t size);
inline void write_file(const std::filesystem::path& path, std::string_view s) {
  write_file(path, reinterpret_cast<const uint8_t*>(s.data()), s.size());
}
std::string read_file(const std::filesystem::path& path);

// fuzz/data: small valid files (weights, shards, ONNX data) the targets place beside the input.
std::filesystem::path data_dir();

[[noreturn]] void finding(const char* what, const std::string& detail);

// Runs body; user-facing hfx::Errors are the expected outcome of bad input and are swallowed.
template <typename Body>
void expect_user_errors(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Internal) finding("hfx::Error of kind internal", e.describe());
  } catch (const std::exception& e) {
    finding("an exception that is not hfx::Error", e.what());
  }
}

#define HFX_FUZZ_ASSERT(cond, detail)                                      \
  do {                                                                     \
    if (!(cond)) ::hfx::fuzz::finding("invariant `" #cond "` broken", detail); \
  } while (0)

}  // namespace hfx::fuzz
