#include "runtime/second_thread.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hfx::runtime::detail {
namespace {

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Waits until `state` leaves `from`: spinning a little first (products come back to back within a
// step, and a futex wake costs more than the gap), then asleep on the futex.
uint32_t wait_while(std::atomic<uint32_t>& state, uint32_t from) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
  for (int i = 0;; ++i) {
    const uint32_t now = state.load(std::memory_order_acquire);
    if (now != from) return now;
    cpu_relax();
    if (i % 16 == 15 && std::chrono::steady_clock::now() > give_up) break;
  }
  for (;;) {
    state.wait(from, std::memory_order_acquire);
    const uint32_t now = state.load(std::memory_order_acquire);
    if (now != from) return now;
  }
}

class KeptThread {
 public:
  static KeptThread& get() {
    static KeptThread* kept = new KeptThread;  // never destroyed: the thread sleeps through exit
    return *kept;
  }

  // False when another caller holds the thread.
  bool try_run_beside(void (*other)(void*), void* other_ctx, void (*own)(void*), void* own_ctx) {
    std::unique_lock<std::mutex> hold(owner_, std::try_to_lock);
    if (!hold.owns_lock()) return false;
    fn_ = other;
    ctx_ = other_ctx;
    other_failed_ = nullptr;
    state_.store(kPosted, std::memory_order_release);
    state_.notify_one();
    std::exception_ptr failed;
    try {
      own(own_ctx);
    } catch (...) {
      failed = std::current_exception();
    }
    wait_while(state_, kPosted);
    state_.store(kIdle, std::memory_order_relaxed);
    if (!failed) failed = other_failed_;
    if (failed) std::rethrow_exception(failed);
    return true;
  }

 private:
  enum : uint32_t { kIdle, kPosted, kDone };

  KeptThread() { std::thread([this] { serve(); }).detach(); }

  void serve() {
    for (;;) {
      const uint32_t now = state_.load(std::memory_order_acquire);
      if (now != kPosted) {
        wait_while(state_, now);
        continue;
      }
      try {
        fn_(ctx_);
      } catch (...) {  // handed to the caller, not std::terminate on this thread
        other_failed_ = std::current_exception();
      }
      state_.store(kDone, std::memory_order_release);
      state_.notify_one();
    }
  }

  std::mutex owner_;  // the caller whose half the thread runs
  std::atomic<uint32_t> state_{kIdle};
  void (*fn_)(void*) = nullptr;
  void* ctx_ = nullptr;
  std::exception_ptr other_failed_;  // written by the kept thread before kDone, read by the caller after
};

}  // namespace

void run_beside(void (*other)(void*), void* other_ctx, void (*own)(void*), void* own_ctx) {
  if (KeptThread::get().try_run_beside(other, other_ctx, own, own_ctx)) return;
  std::exception_ptr failed, other_failed;
  std::thread helper([&] {
    try {
      other(other_ctx);
    } catch (...) {
      other_failed = std::current_exception();
    }
  });
  try {
    own(own_ctx);
  } catch (...) {
    failed = std::current_exception();
  }
  helper.join();
  if (!failed) failed = other_failed;
  if (failed) std::rethrow_exception(failed);
}

}  // namespace hfx::runtime::detail
