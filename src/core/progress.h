// Progress of long work (tensors, bytes, rate) on stderr. On a terminal: one line redrawn in place
// (carriage returns). Elsewhere (a CI log, a pipe): a plain line every few seconds, none for work that
// ends sooner, so a log holds no carriage returns and a quick export prints nothing extra (F#26).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace hfx {

// Where progress goes and how. The default: stderr, `terminal` from isatty(2), a plain line every
// 10 s, or every $HFX_PROGRESS_SECONDS seconds (0: at every update, which the tests use).
struct ProgressOutput {
  std::FILE* file = stderr;
  bool terminal = false;
  double line_seconds = 10;
  static ProgressOutput from_environment();
};

class Progress {
 public:
  // Items are tensors, counted with their bytes and a rate.
  Progress(std::string what, int64_t total_items, int64_t total_bytes, ProgressOutput out = ProgressOutput::from_environment());
  // Items are `unit` (e.g. "runs", "steps"), counted alone; total_items 0: not known in advance.
  static Progress steps(std::string what, int64_t total_items, std::string unit,
                        ProgressOutput out = ProgressOutput::from_environment());
  ~Progress();
  void advance(int64_t items, int64_t bytes);
  void finish();

 private:
  std::string status() const;  // "what: 3/41 tensors, 12.0 KiB/545.6 KiB, 1.0 MiB/s"
  void draw(bool final);
  std::string what_;
  std::string unit_ = "tensors";
  bool with_bytes_ = true;
  int64_t total_items_, total_bytes_;
  int64_t items_ = 0, bytes_ = 0;
  ProgressOutput out_;
  bool finished_ = false;
  bool any_line_ = false;  // not a terminal: a periodic line was printed, so the end gets one too
  std::chrono::steady_clock::time_point start_, last_draw_;
};

std::string human_bytes(int64_t bytes);

}  // namespace hfx
