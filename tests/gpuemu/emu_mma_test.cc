// The emulator's warp-level tensor-core helpers (gpuemu/platform.h): mma.sync m16n8k8 TF32
// computes D = A * B + C with the PTX ISA's fragment layout and TF32 operands, cvt.rna.tf32
// rounds to nearest with ties away from zero, a kernel with the fragments swapped gives a
// wrong answer, and a warp whose lanes do not all reach the mma is reported.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpuemu/buffer.h"
#include "gpuemu/host_compiler.h"
#include "gpuemu/module.h"

namespace lathe::gpuemu {
namespace {

// One warp: A (16x8 row-major), B (8x8 row-major, k x n) and C (16x8) from global memory into
// fragments, D = A*B + C to global memory. `a_regs` sets the four A registers (the correct
// layout: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)); `guard` may end lanes early.
std::string MmaKernel(const std::string& a_regs, const std::string& guard = "") {
  return "extern \"C\" __global__ void mma(float* a, float* b, float* c, float* d) {\n"
         "  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;\n" +
         guard +
         "  unsigned af[4], bf[2];\n"
         "  float acc[4];\n" +
         a_regs +
         "  bf[0] = lathe_cvt_tf32(b[t * 8 + g]);\n"
         "  bf[1] = lathe_cvt_tf32(b[(t + 4) * 8 + g]);\n"
         "  for (int q = 0; q < 4; ++q) acc[q] = c[(g + (q >= 2 ? 8 : 0)) * 8 + 2 * t + (q & 1)];\n"
         "  lathe_mma_m16n8k8_tf32(acc, af, bf);\n"
         "  for (int q = 0; q < 4; ++q) d[(g + (q >= 2 ? 8 : 0)) * 8 + 2 * t + (q & 1)] = acc[q];\n"
         "}\n";
}

const char* const kARegs =
    "  af[0] = lathe_cvt_tf32(a[g * 8 + t]);\n"
    "  af[1] = lathe_cvt_tf32(a[(g + 8) * 8 + t]);\n"
    "  af[2] = lathe_cvt_tf32(a[g * 8 + t + 4]);\n"
    "  af[3] = lathe_cvt_tf32(a[(g + 8) * 8 + t + 4]);\n";

// TF32 rounding as PTX's cvt.rna.tf32.f32 defines it, on the host.
float Tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

class EmuMmaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto cxx = FindHostCompiler(); !cxx.ok()) GTEST_SKIP() << cxx.status();
    a_ = *EmuBuffer::Allocate(16 * 8 * 4, "a");
    b_ = *EmuBuffer::Allocate(8 * 8 * 4, "b");
    c_ = *EmuBuffer::Allocate(16 * 8 * 4, "c");
    d_ = *EmuBuffer::Allocate(16 * 8 * 4, "d");
    // Values with low mantissa bits set, which TF32 drops.
    for (int i = 0; i < 128; ++i)
      a_->data()[i] =
          static_cast<float>((i * 37) % 29) / 8.0f - 1.75f + static_cast<float>(i % 7) * 0x1p-18f;
    for (int i = 0; i < 64; ++i)
      b_->data()[i] =
          -0.5f + static_cast<float>(i % 11) / 16.0f + static_cast<float>(i % 5) * 0x1p-17f;
    for (int i = 0; i < 128; ++i) c_->data()[i] = static_cast<float>(i % 3) - 1.0f;
    d_->Fill32(0x7fc00000u);
  }
  absl::Status Run(const std::string& text) {
    auto m = EmuModule::Build(text, {{"mma", 4}});
    if (!m.ok()) return m.status();
    const int64_t grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    return (*m)->Launch("mma", grid, block, {a_->data(), b_->data(), c_->data(), d_->data()});
  }
  // The largest |d - want| over D, with the operands rounded to TF32 or not.
  double MaxError(bool tf32) const {
    double worst = 0;
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 8; ++j) {
        double want = c_->data()[i * 8 + j];
        for (int k = 0; k < 8; ++k) {
          float x = a_->data()[i * 8 + k], y = b_->data()[k * 8 + j];
          want += static_cast<double>(tf32 ? Tf32(x) : x) * static_cast<double>(tf32 ? Tf32(y) : y);
        }
        worst = std::max(worst, std::fabs(want - static_cast<double>(d_->data()[i * 8 + j])));
      }
    }
    return worst;
  }
  std::unique_ptr<EmuBuffer> a_, b_, c_, d_;
};

TEST_F(EmuMmaTest, MmaComputesTheProductOfTf32Operands) {
  ASSERT_TRUE(Run(MmaKernel(kARegs)).ok());
  EXPECT_LT(MaxError(true), 1e-5);
  // The fp32 product differs: the operands really were rounded to TF32.
  EXPECT_GT(MaxError(false), 1e-5);
}

TEST_F(EmuMmaTest, SwappedFragmentsGiveAWrongAnswer) {
  const std::string swapped =
      "  af[0] = lathe_cvt_tf32(a[g * 8 + t]);\n"
      "  af[2] = lathe_cvt_tf32(a[(g + 8) * 8 + t]);\n"
      "  af[1] = lathe_cvt_tf32(a[g * 8 + t + 4]);\n"
      "  af[3] = lathe_cvt_tf32(a[(g + 8) * 8 + t + 4]);\n";
  ASSERT_TRUE(Run(MmaKernel(swapped)).ok());
  EXPECT_GT(MaxError(true), 1e-2);
}

TEST_F(EmuMmaTest, ALaneThatSkipsTheMmaIsWarpDivergence) {
  absl::Status st = Run(MmaKernel(kARegs, "  if (lane == 5) return;\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_NE(st.message().find("warp divergence"), std::string::npos) << st;
  EXPECT_NE(st.message().find("thread (5,0,0) returned"), std::string::npos) << st;
}

TEST_F(EmuMmaTest, CvtRoundsToNearestTiesAwayFromZero) {
  // d[i] = float(cvt(a[i])): 1 + 2^-11 (a tie) rounds up to 1 + 2^-10, 1 + 2^-12 down to 1,
  // -(1 + 2^-11) to -(1 + 2^-10).
  const std::string text =
      "extern \"C\" __global__ void mma(float* a, float* b, float* c, float* d) {\n"
      "  d[threadIdx.x] = __uint_as_float(lathe_cvt_tf32(a[threadIdx.x]));\n}\n";
  a_->data()[0] = 1.0f + 0x1p-11f;
  a_->data()[1] = 1.0f + 0x1p-12f;
  a_->data()[2] = -(1.0f + 0x1p-11f);
  auto m = EmuModule::Build(text, {{"mma", 4}});
  ASSERT_TRUE(m.ok()) << m.status();
  const int64_t grid[3] = {1, 1, 1}, block[3] = {3, 1, 1};
  ASSERT_TRUE(
      (*m)->Launch("mma", grid, block, {a_->data(), b_->data(), c_->data(), d_->data()}).ok());
  EXPECT_EQ(d_->data()[0], 1.0f + 0x1p-10f);
  EXPECT_EQ(d_->data()[1], 1.0f);
  EXPECT_EQ(d_->data()[2], -(1.0f + 0x1p-10f));
}

}  // namespace
}  // namespace lathe::gpuemu
