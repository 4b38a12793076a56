#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace hfx {

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) { v /= 1024; ++u; }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

Progress::Progress(std::string what, int64_t total_items, int64_t total_bytes)
    : what_(std::move(what)), total_items_(total_items), total_bytes_(total_bytes),
      enabled_(::isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

Progress Progress::steps(std::string what, int64_t total_items, std::string unit) {
  Progress p(std::move(what), total_items, 0);
  p.unit_ = std::move(unit);
  p.with_bytes_ = false;
  return p;
}

Progress::~Progress() {
  if (!finished_ && enabled_ && items_ > 0) std::fputs("\n", stderr);
}

void Progress::advance(int64_t items, int64_t bytes) {
  items_ += items;
  bytes_ += bytes;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ > std::chrono::milliseconds(100)) {
    last_draw_ = now;
    draw(false);
  }
}

void Progress::finish() {
  if (finished_) return;
  draw(true);
  finished_ = true;
}

void Progress::draw(bool final) {
  if (!enabled_) return;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (!with_bytes_) {
    const std::string total = total_items_ > 0 ? fmt::format("/{}", total_items_) : "";
    std::fprintf(stderr, "\r%s: %lld%s %s, %.0f s   %s", what_.c_str(), (long long)items_, total.c_str(), unit_.c_str(),
                 secs, final ? "\n" : "");
    std::fflush(stderr);
    return;
  }
  double rate = secs > 0 ? double(bytes_) / secs : 0;
  std::fprintf(stderr, "\r%s: %lld/%lld tensors, %s/%s, %s/s   %s", what_.c_str(), (long long)items_,
               (long long)total_items_, human_bytes(bytes_).c_str(), human_bytes(total_bytes_).c_str(),
               human_bytes(int64_t(rate)).c_str(), final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace hfx
