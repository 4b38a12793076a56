// hfx's one error model: exceptions of type hfx::Error, converted to a one-line message and an exit
// code at the CLI boundary. An error carries a category, what was expected and what was found, and
// a context chain (file -> tensor -> layer -> pass) that callers add as the error travels up.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace hfx {

enum class ErrorKind {
  BadInput,     // the user's files or flags are wrong
  Unsupported,  // valid input that hfx does not handle (yet)
  Io,           // the operating system refused (open, read, write, rename)
  Internal,     // a bug in hfx
  Mismatch,     // an artifact's numbers differ from its reference beyond the tolerance (verification)
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message);

  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  const std::vector<std::string>& context() const { return context_; }

  // Prepends a context frame ("file model.safetensors", "layer 3"); outermost frame first.
  Error& with_context(std::string frame);

  // "<outer>: <inner>: <message>", one line.
  std::string describe() const;

 private:
  void refresh();
  ErrorKind kind_;
  std::string message_;
  std::vector<std::string> context_;
  std::string what_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(kind, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void bad_input(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(ErrorKind::BadInput, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void unsupported(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(ErrorKind::Unsupported, fmt::format(format, std::forward<Args>(args)...));
}

// Runs `body`; if it throws hfx::Error, adds `frame` to its context and rethrows.
template <typename Body>
auto with_context(const std::string& frame, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (Error& e) {
    e.with_context(frame);
    throw;
  }
}

}  // namespace hfx

// Programmer errors: abort the operation with file:line. Never used for user input.
#define HFX_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond))                                                                         \
      throw ::hfx::Error(::hfx::ErrorKind::Internal,                                     \
                         fmt::format("{}:{}: check `{}` failed: {}", __FILE__, __LINE__, \
                                     #cond, fmt::format(__VA_ARGS__)));                  \
  } while (0)
