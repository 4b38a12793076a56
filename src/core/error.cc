#include "core/error.h"

namespace hfx {

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (1 to 4), or 0 when the bytes there are not one.
size_t utf8_length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n;
  unsigned cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  return n;
}

// Messages quote user data (tensor names, JSON text, file names): keep them one printable line of
// valid UTF-8 by escaping control characters and ill-formed bytes.
std::string one_printable_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (n == 1 && c >= 0x20 && c != 0x7F) {
      out += char(c);
    } else if (n > 1) {
      out.append(s, i, n);
    } else {
      static const char* hex = "0123456789abcdef";
      if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else if (c == '\t') out += "\\t";
      else out += {'\\', 'x', hex[c >> 4], hex[c & 15]};
    }
    i += n > 0 ? n : 1;
  }
  return out;
}

}  // namespace

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::BadInput: return "bad input";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::Io: return "i/o error";
    case ErrorKind::Internal: return "internal error";
    case ErrorKind::Mismatch: return "verification failed";
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
  what_ = one_printable_line(what_);
  static_cast<std::runtime_error&>(*this) = std::runtime_error(what_);
}

}  // namespace hfx
