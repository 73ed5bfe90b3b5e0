// CUDA candidates are compiled here even without a GPU (CI has nvcc and no GPU).
#include <gtest/gtest.h>

#include <cstdlib>

#include "backends/cuda/cuda_backend.h"
#include "harness.h"

namespace kfab::test {

class CudaBuild : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("KFAB_CACHE_DIR", (std::string(KFAB_BINARY) + ".test-cache").c_str(), 1);
    if (!backend_.has_compiler()) GTEST_SKIP() << "nvcc is not installed";
  }
  CudaBackend backend_;
};

TEST_F(CudaBuild, CompilesEveryCudaCandidateAndCachesIt) {
  for (const std::string& f : {fixture("tasks/affine/candidates/good.cu"), fixture("broken/oob_write.cu"),
                              std::string(KFAB_SOURCE_DIR) + "/tasks/core/softmax/candidates/block_softmax.cu"}) {
    auto r = backend_.build(f);
    ASSERT_TRUE(r.ok()) << f << "\n" << r.failure().message;
    EXPECT_TRUE(std::filesystem::exists(r.value().artifact));
    auto again = backend_.build(f);
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again.value().cached);
    EXPECT_EQ(again.value().key, r.value().key);
  }
}

TEST_F(CudaBuild, ACompileErrorCarriesNvccsMessage) {
  const auto f = scratch() / "bad.cu";
  ASSERT_TRUE(write_file_atomic(f, "#include \"kfab/candidate.h\"\n__global__ void k() { undefined_name = 1; }\n").has_value());
  auto r = backend_.build(f);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.failure().message.find("undefined_name"), std::string::npos) << r.failure().message;
}

TEST_F(CudaBuild, ArchitectureComesFromTheDeviceOrDefaultsToHopper) {
  EXPECT_EQ(backend_.arch().rfind("sm_", 0), 0u);
}

}  // namespace kfab::test
