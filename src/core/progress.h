// Progress of long work (tensors, bytes, rate) on stderr, only when stderr is a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace hfx {

class Progress {
 public:
  // Items are tensors, counted with their bytes and a rate.
  Progress(std::string what, int64_t total_items, int64_t total_bytes);
  // Items are `unit` (e.g. "runs", "steps"), counted alone; total_items 0: not known in advance.
  static Progress steps(std::string what, int64_t total_items, std::string unit);
  ~Progress();
  void advance(int64_t items, int64_t bytes);
  void finish();

 private:
  void draw(bool final);
  std::string what_;
  std::string unit_ = "tensors";
  bool with_bytes_ = true;
  int64_t total_items_, total_bytes_;
  int64_t items_ = 0, bytes_ = 0;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

std::string human_bytes(int64_t bytes);

}  // namespace hfx
