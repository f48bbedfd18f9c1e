// The emulator's cp.async (gpuemu/platform.h): a copy lands in shared memory only when its
// group is waited for, so a kernel that reads the data early (no wait, a wait for too few
// groups, a stage refilled while another thread still reads it) gives NaN where the value
// should be; src-size zero-fills; misaligned copies and copies outside shared memory are
// reported with their line.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "gpuemu/buffer.h"
#include "gpuemu/host_compiler.h"
#include "gpuemu/module.h"

namespace lathe::gpuemu {
namespace {

constexpr int kThreads = 64;

class EmuCpAsyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto cxx = FindHostCompiler(); !cxx.ok()) GTEST_SKIP() << cxx.status();
    in_ = *EmuBuffer::Allocate(8 * kThreads * 4, "in");
    out_ = *EmuBuffer::Allocate(8 * kThreads * 4, "out");
    for (int i = 0; i < 8 * kThreads; ++i) in_->data()[i] = static_cast<float>(i) + 0.5f;
    out_->Fill32(0);
  }
  // Runs `body` as kernel k(in, out) on one block of kThreads threads.
  absl::Status Run(const std::string& body) {
    auto m = EmuModule::Build("extern \"C\" __global__ void k(float* in, float* out) {\n" +
                                  std::string("  const int tid = threadIdx.x;\n") + body + "}\n",
                              {{"k", 2}});
    if (!m.ok()) return m.status();
    const int64_t grid[3] = {1, 1, 1}, block[3] = {kThreads, 1, 1};
    return (*m)->Launch("k", grid, block, {in_->data(), out_->data()});
  }
  // The number of out[0, n) that hold in[i] (the rest: NaN or wrong).
  int Matching(int n) const {
    int ok = 0;
    for (int i = 0; i < n; ++i) ok += out_->data()[i] == in_->data()[i];
    return ok;
  }
  int Nans(int n) const {
    int nans = 0;
    for (int i = 0; i < n; ++i) nans += std::isnan(out_->data()[i]);
    return nans;
  }
  std::unique_ptr<EmuBuffer> in_, out_;
};

// Each thread copies 4 floats (16 bytes) into s, `wait` (or nothing), a barrier, then every
// thread reads its neighbour's 4 floats back out (another thread's copy).
std::string CopyThenRead(const std::string& wait) {
  return "  __shared__ __align__(16) float s[" + std::to_string(4 * kThreads) +
         "];\n"
         "  lathe_cp_async16(&s[4 * tid], &in[4 * tid], 16);\n"
         "  lathe_cp_async_commit();\n" +
         wait +
         "  __syncthreads();\n"
         "  const int o = (tid + 1) % " +
         std::to_string(kThreads) +
         ";\n"
         "  for (int i = 0; i < 4; ++i) out[4 * o + i] = s[4 * o + i];\n";
}

TEST_F(EmuCpAsyncTest, WaitedCopiesLand) {
  ASSERT_TRUE(Run(CopyThenRead("  lathe_cp_async_wait(0);\n")).ok());
  EXPECT_EQ(Matching(4 * kThreads), 4 * kThreads);
}

TEST_F(EmuCpAsyncTest, AMissingWaitReadsNaN) {
  ASSERT_TRUE(Run(CopyThenRead("")).ok());
  EXPECT_EQ(Nans(4 * kThreads), 4 * kThreads);
}

TEST_F(EmuCpAsyncTest, WaitGroupLeavesTheNewestGroupsInFlight) {
  // Two groups: wait_group 1 lands the first only; wait_group 0 both.
  const std::string text = "  __shared__ __align__(16) float s[" + std::to_string(8 * kThreads) +
                           "];\n"
                           "  lathe_cp_async16(&s[4 * tid], &in[4 * tid], 16);\n"
                           "  lathe_cp_async_commit();\n"
                           "  lathe_cp_async16(&s[4 * (tid + " +
                           std::to_string(kThreads) + ")], &in[4 * (tid + " +
                           std::to_string(kThreads) +
                           ")], 16);\n"
                           "  lathe_cp_async_commit();\n"
                           "  lathe_cp_async_wait(WAIT);\n"
                           "  __syncthreads();\n"
                           "  for (int i = 0; i < 8; ++i) out[8 * tid + i] = s[8 * tid + i];\n";
  ASSERT_TRUE(Run("#define WAIT 1\n" + text).ok());
  EXPECT_EQ(Matching(4 * kThreads), 4 * kThreads);
  EXPECT_EQ(Nans(8 * kThreads), 4 * kThreads);
  ASSERT_TRUE(Run("#undef WAIT\n#define WAIT 0\n" + text).ok());
  EXPECT_EQ(Matching(8 * kThreads), 8 * kThreads);
}

TEST_F(EmuCpAsyncTest, UncommittedCopiesAreNotWaitedFor) {
  // wait_group 0 waits for committed groups; a copy issued after the last commit stays out.
  ASSERT_TRUE(Run("  __shared__ __align__(16) float s[" + std::to_string(4 * kThreads) +
                  "];\n"
                  "  lathe_cp_async16(&s[4 * tid], &in[4 * tid], 16);\n"
                  "  lathe_cp_async_wait(0);\n"
                  "  __syncthreads();\n"
                  "  for (int i = 0; i < 4; ++i) out[4 * tid + i] = s[4 * tid + i];\n")
                  .ok());
  EXPECT_EQ(Nans(4 * kThreads), 4 * kThreads);
}

TEST_F(EmuCpAsyncTest, SourceSizeZeroFills) {
  // 4-byte copies: even threads copy their element, odd ones ask for 0 source bytes.
  ASSERT_TRUE(Run("  __shared__ float s[" + std::to_string(kThreads) +
                  "];\n"
                  "  lathe_cp_async4(&s[tid], &in[tid], tid % 2 ? 0 : 4);\n"
                  "  lathe_cp_async_commit();\n"
                  "  lathe_cp_async_wait(0);\n"
                  "  __syncthreads();\n"
                  "  out[tid] = s[tid];\n")
                  .ok());
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(out_->data()[i], i % 2 ? 0.0f : in_->data()[i]) << i;
  }
}

TEST_F(EmuCpAsyncTest, RefillingAStageOthersStillReadIsCaught) {
  // A two-stage pipeline over 4 tiles of 4 floats per thread; every thread reads its
  // neighbour's part of the current stage. Without the barrier that ends the reads of a stage
  // before it is refilled, a thread's next copy overwrites (with NaN until it lands) what the
  // neighbour has still to read.
  const std::string pipeline = "  __shared__ __align__(16) float s[2][" +
                               std::to_string(4 * kThreads) +
                               "];\n"
                               "  const int o = (tid + 1) % " +
                               std::to_string(kThreads) +
                               ";\n"
                               "  lathe_cp_async16(&s[0][4 * tid], &in[4 * tid], 16);\n"
                               "  lathe_cp_async_commit();\n"
                               "  float sum = 0.0f;\n"
                               "  for (int t = 0; t < 2; ++t) {\n"
                               "    lathe_cp_async_wait(0);\n"
                               "    __syncthreads();\n"
                               "    for (int i = 0; i < 4; ++i) sum += s[t % 2][4 * o + i];\n"
                               "    END_OF_READS\n"
                               "    if (t + 1 < 2) {\n"
                               "      lathe_cp_async16(&s[(t + 1) % 2][4 * tid], &in[" +
                               std::to_string(4 * kThreads) +
                               " + 4 * tid], 16);\n"
                               "      lathe_cp_async_commit();\n"
                               "    }\n"
                               "  }\n"
                               "  out[tid] = sum;\n";
  // Correct with 2 stages as written (the refilled stage is the other one); with one stage,
  // only a barrier between the reads and the refill keeps it so: without it a thread's copy
  // lands (its own wait) or holds NaN while its neighbour still reads the first tile.
  auto correct = [&] {
    int ok = 0;
    for (int tid = 0; tid < kThreads; ++tid) {
      const int o = (tid + 1) % kThreads;
      float sum = 0.0f;
      for (int t = 0; t < 2; ++t) {
        for (int i = 0; i < 4; ++i) sum += in_->data()[4 * kThreads * t + 4 * o + i];
      }
      ok += out_->data()[tid] == sum;
    }
    return ok;
  };
  ASSERT_TRUE(Run("#define END_OF_READS\n" + pipeline).ok());
  EXPECT_EQ(correct(), kThreads);
  std::string one_stage = pipeline;
  for (size_t p; (p = one_stage.find("(t + 1) % 2")) != std::string::npos;) {
    one_stage.replace(p, 11, "0");
  }
  for (size_t p; (p = one_stage.find("t % 2")) != std::string::npos;) one_stage.replace(p, 5, "0");
  ASSERT_TRUE(Run("#define END_OF_READS\n" + one_stage).ok());
  EXPECT_LT(correct(), kThreads) << "a stage refilled under its readers was not caught";
  ASSERT_TRUE(Run("#define END_OF_READS __syncthreads();\n" + one_stage).ok());
  EXPECT_EQ(correct(), kThreads);
}

TEST_F(EmuCpAsyncTest, MisalignedCopyIsReported) {
  absl::Status st =
      Run("  __shared__ __align__(16) float s[8];\n"
          "  if (tid == 0) lathe_cp_async16(&s[1], &in[0], 16);\n");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("line 4: cp.async of 16 bytes"), std::string::npos) << st;
}

TEST_F(EmuCpAsyncTest, CopyOutsideSharedMemoryIsReported) {
  absl::Status st = Run("  if (tid == 0) lathe_cp_async16(&out[0], &in[0], 16);\n");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("outside shared memory"), std::string::npos) << st;
}

}  // namespace
}  // namespace lathe::gpuemu
