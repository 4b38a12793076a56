#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

namespace hfx {

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) { v /= 1024; ++u; }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

ProgressOutput ProgressOutput::from_environment() {
  ProgressOutput o;
  o.terminal = ::isatty(STDERR_FILENO) == 1;
  if (const char* s = std::getenv("HFX_PROGRESS_SECONDS")) {
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end != s && *end == '\0' && v >= 0) o.line_seconds = v;  // anything else: the default
  }
  return o;
}

Progress::Progress(std::string what, int64_t total_items, int64_t total_bytes, ProgressOutput out)
    : what_(std::move(what)), total_items_(total_items), total_bytes_(total_bytes), out_(out),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

Progress Progress::steps(std::string what, int64_t total_items, std::string unit, ProgressOutput out) {
  Progress p(std::move(what), total_items, 0, out);
  p.unit_ = std::move(unit);
  p.with_bytes_ = false;
  return p;
}

Progress::~Progress() {
  if (!finished_ && out_.terminal && items_ > 0) std::fputs("\n", out_.file);
}

void Progress::advance(int64_t items, int64_t bytes) {
  items_ += items;
  bytes_ += bytes;
  auto now = std::chrono::steady_clock::now();
  const auto every = out_.terminal ? std::chrono::duration<double>(0.1) : std::chrono::duration<double>(out_.line_seconds);
  if (now - last_draw_ >= every) {
    last_draw_ = now;
    draw(false);
  }
}

void Progress::finish() {
  if (finished_) return;
  draw(true);
  finished_ = true;
}

std::string Progress::status() const {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (!with_bytes_) {
    const std::string total = total_items_ > 0 ? fmt::format("/{}", total_items_) : "";
    return fmt::format("{}: {}{} {}, {:.0f} s", what_, items_, total, unit_, secs);
  }
  const double rate = secs > 0 ? double(bytes_) / secs : 0;
  return fmt::format("{}: {}/{} tensors, {}/{}, {}/s", what_, items_, total_items_, human_bytes(bytes_),
                     human_bytes(total_bytes_), human_bytes(int64_t(rate)));
}

void Progress::draw(bool final) {
  if (out_.terminal) {
    fmt::print(out_.file, "\r{}   {}", status(), final ? "\n" : "");
  } else {
    // A log gets whole lines only: periodic ones while the work lasts, and the last one only when it
    // lasted long enough to have printed any (the final counts, not a bar's last frame).
    if (final && !any_line_) return;
    any_line_ = true;
    fmt::print(out_.file, "{}{}\n", status(), final ? " (done)" : "");
  }
  std::fflush(out_.file);
}

}  // namespace hfx
