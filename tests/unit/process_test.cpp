// Child's stop and start (core/process.h), which the evaluation relies on to keep a candidate's
// runner still while kfab compares and times the reference.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "core/process.h"

namespace kfab {

namespace {

using Clock = std::chrono::steady_clock;

Child start(const std::string& script) {
  SpawnOptions so;
  so.argv = {"/bin/sh", "-c", script};
  auto c = Child::spawn(so);
  EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().to_string());
  return std::move(*c);
}

}  // namespace

// A child that is frozen is stopped, and thawed it runs to its end.
TEST(Process, FreezeStopsAChildAndThawLetsItFinish) {
  Child c = start("sleep 0.2; exit 7");
  ASSERT_TRUE(c.freeze(Clock::now() + std::chrono::seconds(10)));
  EXPECT_TRUE(c.frozen());
  EXPECT_FALSE(c.has_exited());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_FALSE(c.has_exited()) << "a frozen child ran on";
  c.thaw();
  const ExitStatus st = c.wait(Clock::now() + std::chrono::seconds(10));
  EXPECT_TRUE(st.exited);
  EXPECT_EQ(st.code, 7);
}

// A child killed from outside before kfab could stop it: the stop fails at once, the child is seen to
// have ended, and its status still names the signal that ended it (not a kill of kfab's).
TEST(Process, AChildKilledBeforeItsStopIsSeenEndedWithItsSignal) {
  Child c = start("sleep 30");
  ASSERT_EQ(::kill(c.pid(), SIGKILL), 0);
  const auto t0 = Clock::now();
  while (!c.has_exited() && Clock::now() - t0 < std::chrono::seconds(10)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(c.has_exited());
  EXPECT_FALSE(c.freeze(Clock::now() + std::chrono::seconds(10)));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(9)) << "the stop waited for its deadline on an ended child";
  const ExitStatus st = c.wait(Clock::now());
  EXPECT_FALSE(st.exited);
  EXPECT_EQ(st.signal, SIGKILL);
}

}  // namespace kfab
