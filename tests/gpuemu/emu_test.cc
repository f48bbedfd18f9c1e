// The GPU emulator on hand-written CUDA kernels: a correct tiled kernel with shared memory and
// barriers computes the right answer, and each kind of bug a GPU kernel can have is caught:
// a missing barrier, an off-by-one index, reads and writes out of bounds (before and past a
// buffer), an index past a shared array, a misaligned float4, barrier divergence.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpuemu/buffer.h"
#include "gpuemu/host_compiler.h"
#include "gpuemu/module.h"

namespace lathe::gpuemu {
namespace {

// A tiled transpose-and-scale through shared memory: out[j][i] = 2 * in[i][j] for a 64x64
// matrix, 16x16 tiles, one block per tile, one thread per element; the variants below break
// it in one place each.
constexpr int kN = 64;

std::string TransposeKernel(const std::string& name, const std::string& load,
                            const std::string& barrier, const std::string& store) {
  return "extern \"C\" __global__ void __launch_bounds__(256) " + name +
         "(const float* __restrict__ in, float* __restrict__ out) {\n"
         "  __shared__ float tile[16 * 17];\n"
         "  int tx = threadIdx.x, ty = threadIdx.y;\n"
         "  int bx = blockIdx.x, by = blockIdx.y;\n" +
         load + "\n" + barrier + "\n" + store + "\n}\n";
}

const char* const kLoad = "  tile[ty * 17 + tx] = in[(by * 16 + ty) * 64 + bx * 16 + tx];";
const char* const kStore = "  out[(bx * 16 + ty) * 64 + by * 16 + tx] = 2.0f * tile[tx * 17 + ty];";

struct Buffers {
  std::unique_ptr<EmuBuffer> in, out;
  Buffers() {
    in = *EmuBuffer::Allocate(kN * kN * 4, "in");
    out = *EmuBuffer::Allocate(kN * kN * 4, "out");
    for (int i = 0; i < kN * kN; ++i) in->data()[i] = static_cast<float>(i % 97) - 40.0f;
    out->Fill32(0x7fc00000u);
  }
  // The first wrong element, or -1.
  int FirstWrong() const {
    for (int i = 0; i < kN; ++i) {
      for (int j = 0; j < kN; ++j) {
        float want = 2.0f * in->data()[i * kN + j];
        if (!(out->data()[j * kN + i] == want)) return j * kN + i;
      }
    }
    return -1;
  }
  std::vector<float*> args() { return {in->data(), out->data()}; }
};

const int64_t kGrid[3] = {4, 4, 1};
const int64_t kBlock[3] = {16, 16, 1};

class EmuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto cxx = FindHostCompiler(); !cxx.ok()) GTEST_SKIP() << cxx.status();
  }
  std::unique_ptr<EmuModule> Build(const std::string& text, const std::vector<KernelSignature>& k) {
    auto m = EmuModule::Build(text, k);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
};

TEST_F(EmuTest, TiledKernelWithBarrierIsCorrect) {
  auto m = Build(TransposeKernel("t", kLoad, "  __syncthreads();", kStore), {{"t", 2}});
  ASSERT_TRUE(m);
  Buffers b;
  ASSERT_TRUE(m->Launch("t", kGrid, kBlock, b.args()).ok());
  EXPECT_EQ(b.FirstWrong(), -1);
  EXPECT_TRUE(b.out->CheckCanaries().ok());
}

TEST_F(EmuTest, MissingBarrierGivesAWrongAnswer) {
  auto m = Build(TransposeKernel("t", kLoad, "", kStore), {{"t", 2}});
  ASSERT_TRUE(m);
  Buffers b;
  ASSERT_TRUE(m->Launch("t", kGrid, kBlock, b.args()).ok());
  EXPECT_NE(b.FirstWrong(), -1) << "a missing barrier went unnoticed";
}

TEST_F(EmuTest, OffByOneIndexGivesAWrongAnswer) {
  auto m =
      Build(TransposeKernel("t", kLoad, "  __syncthreads();",
                            "  out[(bx * 16 + ty) * 64 + by * 16 + tx] = 2.0f * tile[tx * 17 + "
                            "ty + (tx == 15 ? 0 : 1)];"),
            {{"t", 2}});
  ASSERT_TRUE(m);
  Buffers b;
  ASSERT_TRUE(m->Launch("t", kGrid, kBlock, b.args()).ok());
  EXPECT_NE(b.FirstWrong(), -1);
}

TEST_F(EmuTest, ReadPastTheEndIsAnIllegalAddress) {
  auto m = Build(
      TransposeKernel("t", "  tile[ty * 17 + tx] = in[(by * 16 + ty) * 64 + bx * 16 + tx + 1];",
                      "  __syncthreads();", kStore),
      {{"t", 2}});
  ASSERT_TRUE(m);
  Buffers b;
  absl::Status st = m->Launch("t", kGrid, kBlock, b.args());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_NE(st.message().find("illegal address"), std::string::npos) << st;
  EXPECT_NE(st.message().find("read of element 4096 of buffer 'in' (4096 elements): past its end"),
            std::string::npos)
      << st;
  EXPECT_NE(st.message().find("block (3,3,0) thread (15,15,0)"), std::string::npos) << st;
}

TEST_F(EmuTest, WriteFarBeforeTheStartIsAnIllegalAddress) {
  auto m = Build(TransposeKernel("t", kLoad, "  __syncthreads();",
                                 "  out[(bx * 16 + ty) * 64 + by * 16 + tx - 2048] = 1.0f;"),
                 {{"t", 2}});
  ASSERT_TRUE(m);
  Buffers b;
  absl::Status st = m->Launch("t", kGrid, kBlock, b.args());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("write of element -"), std::string::npos) << st;
  EXPECT_NE(st.message().find("of buffer 'out' (4096 elements): before its start"),
            std::string::npos)
      << st;
}

TEST_F(EmuTest, WriteJustPastAnOddSizedBufferIsFoundByItsCanary) {
  // 10 floats: the buffer ends 8 bytes before its guard page (its start is 16-byte aligned).
  std::string text =
      "extern \"C\" __global__ void w(float* __restrict__ out) { out[threadIdx.x] = 1.0f; }\n";
  auto m = Build(text, {{"w", 1}});
  ASSERT_TRUE(m);
  auto out = *EmuBuffer::Allocate(10 * 4, "out");
  const int64_t grid[3] = {1, 1, 1}, block[3] = {11, 1, 1};
  ASSERT_TRUE(m->Launch("w", grid, block, {out->data()}).ok());
  absl::Status st = out->CheckCanaries();
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_NE(st.message().find("element 10 of buffer 'out' (10 elements): past its end"),
            std::string::npos)
      << st;
  EXPECT_TRUE(out->CheckCanaries().ok()) << "refilled after the report";
}

TEST_F(EmuTest, IndexPastASharedArrayIsReportedWithItsLine) {
  auto m =
      Build(TransposeKernel("t", "  tile[ty * 17 + tx + 17] = 0.0f;", "  __syncthreads();", kStore),
            {{"t", 2}});
  ASSERT_TRUE(m);
  Buffers b;
  absl::Status st = m->Launch("t", kGrid, kBlock, b.args());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("kernel.cu:5:"), std::string::npos) << st;
  // GCC writes the type 'float [272]', clang 'float[272]'.
  EXPECT_NE(st.message().find("index 272 out of bounds for type 'float"), std::string::npos) << st;
}

TEST_F(EmuTest, MisalignedFloat4IsReported) {
  std::string text =
      "extern \"C\" __global__ void v(const float* __restrict__ in, float* __restrict__ out) {\n"
      "  float4 x = *reinterpret_cast<const float4*>(&in[threadIdx.x * 4 + 1]);\n"
      "  out[threadIdx.x] = x.x + x.y + x.z + x.w;\n"
      "}\n";
  auto m = Build(text, {{"v", 2}});
  ASSERT_TRUE(m);
  auto in = *EmuBuffer::Allocate(64 * 4, "in");
  auto out = *EmuBuffer::Allocate(8 * 4, "out");
  const int64_t grid[3] = {1, 1, 1}, block[3] = {8, 1, 1};
  absl::Status st = m->Launch("v", grid, block, {in->data(), out->data()});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("misaligned address: a 16-byte vector access to element 1 of "
                              "buffer 'in'"),
            std::string::npos)
      << st;
  EXPECT_NE(st.message().find("requires 16 byte alignment"), std::string::npos) << st;
}

TEST_F(EmuTest, BarrierDivergenceIsReported) {
  std::string text =
      "extern \"C\" __global__ void d(float* __restrict__ out) {\n"
      "  if (threadIdx.x < 16) {\n"
      "    __syncthreads();\n"
      "  }\n"
      "  out[threadIdx.x] = 1.0f;\n"
      "}\n"
      "extern \"C\" __global__ void e(float* __restrict__ out) {\n"
      "  if (threadIdx.x < 16) {\n"
      "    __syncthreads();\n"
      "  } else {\n"
      "    __syncthreads();\n"
      "  }\n"
      "  out[threadIdx.x] = 1.0f;\n"
      "}\n";
  auto m = Build(text, {{"d", 1}, {"e", 1}});
  ASSERT_TRUE(m);
  auto out = *EmuBuffer::Allocate(32 * 4, "out");
  const int64_t grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
  absl::Status st = m->Launch("d", grid, block, {out->data()});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("barrier divergence"), std::string::npos) << st;
  EXPECT_NE(st.message().find("returned while thread"), std::string::npos) << st;
  EXPECT_NE(st.message().find("on line 3"), std::string::npos) << st;
  st = m->Launch("e", grid, block, {out->data()});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("on line 9"), std::string::npos) << st;
  EXPECT_NE(st.message().find("on line 11"), std::string::npos) << st;
}

TEST_F(EmuTest, AFaultLeavesTheModuleUsable) {
  std::string text =
      "extern \"C\" __global__ void k(const float* __restrict__ in, float* __restrict__ out, "
      "float* __restrict__ n) {\n"
      "  const float* src = n[0] != 0.0f ? (const float*)16 : in;\n"
      "  out[threadIdx.x] = src[threadIdx.x];\n"
      "}\n";
  auto m = Build(text, {{"k", 3}});
  ASSERT_TRUE(m);
  auto in = *EmuBuffer::Allocate(32 * 4, "in");
  auto out = *EmuBuffer::Allocate(32 * 4, "out");
  auto n = *EmuBuffer::Allocate(4, "n");
  for (int i = 0; i < 32; ++i) in->data()[i] = static_cast<float>(i);
  const int64_t grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
  n->data()[0] = 1.0f;
  absl::Status st = m->Launch("k", grid, block, {in->data(), out->data(), n->data()});
  EXPECT_NE(st.message().find("read of address 0x10, in no buffer"), std::string::npos) << st;
  n->data()[0] = 0.0f;
  ASSERT_TRUE(m->Launch("k", grid, block, {in->data(), out->data(), n->data()}).ok());
  EXPECT_EQ(out->data()[31], 31.0f);
}

TEST_F(EmuTest, CompileErrorCarriesTheCompilerMessage) {
  auto m =
      EmuModule::Build("extern \"C\" __global__ void k() { undeclared_thing = 1; }\n", {{"k", 0}});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("undeclared_thing"), std::string::npos) << m.status();
}

TEST(EmuModuleTest, BarrierScanFindsTheKernelsBody) {
  EXPECT_TRUE(KernelUsesBarriers("extern \"C\" __global__ void a() { __syncthreads(); }", "a"));
  EXPECT_FALSE(KernelUsesBarriers(
      "extern \"C\" __global__ void a() { }\nextern \"C\" __global__ void b() { __syncthreads(); }",
      "a"));
}

}  // namespace
}  // namespace lathe::gpuemu
