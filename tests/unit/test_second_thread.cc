// runtime/second_thread.h: the reference executor's kept second thread. Both halves run and are done on
// return, an exception from the caller's half comes out after the other half has finished, and
// callers that find the thread busy (concurrent, or nested inside the other half) get a thread of
// their own instead of waiting for it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/second_thread.h"

using hfx::runtime::detail::run_beside;

TEST(SecondThread, BothHalvesRunOnTwoThreadsAndAreDoneOnReturn) {
  for (int round = 0; round < 1000; ++round) {
    int own = 0, other = 0;
    std::thread::id own_id, other_id;
    auto a = [&] { other = round, other_id = std::this_thread::get_id(); };
    auto b = [&] { own = round, own_id = std::this_thread::get_id(); };
    run_beside(a, b);
    ASSERT_EQ(other, round);
    ASSERT_EQ(own, round);
    ASSERT_EQ(own_id, std::this_thread::get_id());
    ASSERT_NE(other_id, own_id);
  }
}

TEST(SecondThread, TheOtherHalfsExceptionComesOutInTheCaller) {
  auto failing = [] { throw std::runtime_error("other half"); };
  bool own_done = false;
  auto own = [&] { own_done = true; };
  EXPECT_THROW(run_beside(failing, own), std::runtime_error);  // kept thread: not std::terminate
  EXPECT_TRUE(own_done);
  auto nested = [&] { EXPECT_THROW(run_beside(failing, own), std::runtime_error); };  // a thread of its own
  auto nothing = [] {};
  run_beside(nested, nothing);
  int after = 0;
  auto set = [&] { after = 1; };
  run_beside(set, nothing);
  EXPECT_EQ(after, 1);
}

TEST(SecondThread, TheCallersExceptionComesOutAfterTheOtherHalfFinished) {
  std::atomic<bool> other_done{false};
  auto slow = [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    other_done = true;
  };
  auto failing = [] { throw std::runtime_error("own half"); };
  EXPECT_THROW(run_beside(slow, failing), std::runtime_error);
  EXPECT_TRUE(other_done.load());
  int after = 0;  // the thread serves the next caller
  auto set = [&] { after = 1; };
  auto nothing = [] {};
  run_beside(set, nothing);
  EXPECT_EQ(after, 1);
}

TEST(SecondThread, BusyThreadMeansAThreadOfYourOwn) {
  // Nested: the other half splits again while the kept thread is running it.
  std::atomic<int> leaves{0};
  auto leaf = [&] { ++leaves; };
  auto nested = [&] { run_beside(leaf, leaf); };
  run_beside(nested, leaf);
  EXPECT_EQ(leaves.load(), 3);
  // Concurrent callers.
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        auto x = [&] { sum += t; };
        auto y = [&] { sum += 1; };
        run_beside(x, y);
      }
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(sum.load(), 500 * (0 + 1 + 2 + 3) + 4 * 500);
}
