#include "core/error.h"

namespace hfx {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::BadInput: return "bad input";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::Io: return "i/o error";
    case ErrorKind::Internal: return "internal error";
  }
  return "error";
}

Error::Error(ErrorKind kind, std::string message)
    : std::runtime_error(message), kind_(kind), message_(std::move(message)) {
  refresh();
}

Error& Error::with_context(std::string frame) {
  context_.insert(context_.begin(), std::move(frame));
  refresh();
  return *this;
}

std::string Error::describe() const { return what_; }

void Error::refresh() {
  what_.clear();
  for (const auto& frame : context_) what_ += frame + ": ";
  what_ += message_;
  static_cast<std::runtime_error&>(*this) = std::runtime_error(what_);
}

}  // namespace hfx
