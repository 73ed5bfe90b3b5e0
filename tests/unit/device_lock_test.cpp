// The GPU timing lock (eval/device_lock.h): one holder per device at a time, across threads of one
// process as across processes (flock on a file of its own per holder), its name, and the switch off.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "backends/target.h"
#include "eval/device_lock.h"

namespace kfab {
namespace {

namespace fs = std::filesystem;

class DeviceLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kfab-lock-test-" + std::to_string(::getpid()));
    ::setenv("KFAB_LOCK_DIR", dir_.c_str(), 1);
    ::unsetenv("KFAB_DEVICE_LOCK");
  }
  void TearDown() override {
    ::unsetenv("KFAB_LOCK_DIR");
    ::unsetenv("KFAB_DEVICE_LOCK");
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(DeviceLockTest, ASecondHolderWaitsUntilTheFirstLetsGo) {
  std::atomic<bool> first_done{false};
  std::atomic<bool> second_saw_first_done{false};
  std::atomic<bool> waiting{false};
  std::optional<DeviceLock> first;
  first.emplace("gpu-test", nullptr);
  ASSERT_TRUE(first->held());
  EXPECT_TRUE(fs::exists(dir_ / "gpu-test.lock"));
  std::string said;
  double waited = 0.0;
  bool held = false;
  std::thread second([&] {
    DeviceLock lock("gpu-test", [&](const std::string& s) {
      said = s;
      waiting = true;  // said just before it blocks
    });
    second_saw_first_done = first_done.load();
    held = lock.held();
    waited = lock.waited_s();
  });
  while (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  first_done = true;
  first.reset();
  second.join();
  EXPECT_TRUE(second_saw_first_done) << "the second holder got the lock while the first held it";
  EXPECT_TRUE(held);
  EXPECT_GT(waited, 0.0);
  EXPECT_NE(said.find("another process is timing on it"), std::string::npos) << said;
}

TEST_F(DeviceLockTest, OtherDevicesDoNotWait) {
  DeviceLock a("gpu-a", nullptr);
  std::string said;
  DeviceLock b("gpu-b", [&](const std::string& s) { said = s; });
  EXPECT_TRUE(a.held());
  EXPECT_TRUE(b.held());
  EXPECT_EQ(b.waited_s(), 0.0);
  EXPECT_TRUE(said.empty()) << said;
}

TEST_F(DeviceLockTest, OffTimesWithoutIt) {
  ::setenv("KFAB_DEVICE_LOCK", "off", 1);
  DeviceLock a("gpu-a", nullptr);
  DeviceLock b("gpu-a", nullptr);  // would block forever were it taken
  EXPECT_FALSE(a.held());
  EXPECT_FALSE(b.held());
}

TEST_F(DeviceLockTest, ADeviceNamedByUuidIsItsOwnKey) {
  // NVML answers only for a device index; a UUID or MIG name is the key as written, made file-safe
  const auto key = find_target("cuda")->lock_key;
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(key({{"CUDA_VISIBLE_DEVICES", "GPU-8d2c/1,GPU-77"}}), "gpu-GPU-8d2c_1");
  const std::string k = key({{"CUDA_VISIBLE_DEVICES", "1"}});
  // with NVML the PCI address of device 1, without it "1"
  EXPECT_TRUE(k == "gpu-1" || (k.size() == std::string("gpu-0000:00:06.0").size() && k.rfind("gpu-", 0) == 0)) << k;
}

}  // namespace
}  // namespace kfab
