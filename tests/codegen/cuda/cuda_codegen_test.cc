// CUDA C generation and launch plans: every op's default GPU schedule generates, plans are as
// expected, invalid GPU mappings and over-limit launches are rejected with clear messages.
#include "codegen/cuda/cuda_codegen.h"

#include <gtest/gtest.h>

#include <cctype>

#include "../op_specs.h"
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/gpu_schedule.h"
#include "codegen/lower.h"
#include "ir/printer.h"

namespace lathe::codegen::cuda {
namespace {

class CudaCodegenOpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaCodegenOpTest, DefaultScheduleGenerates) {
  auto w = ir::MakeWorkload(GetParam());
  ASSERT_TRUE(w.ok()) << w.status();
  auto sch = DefaultGpuSchedule(*w);
  ASSERT_TRUE(sch.ok()) << sch.status();
  auto src = BuildCudaSource(*sch, "kernel");
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_FALSE(src->plan.kernels.empty());
  EXPECT_NE(src->source.find("extern \"C\" __global__"), std::string::npos);
  EXPECT_TRUE(CheckLaunchLimits(src->plan).ok()) << ToText(src->plan);
  for (const KernelLaunch& k : src->plan.kernels) {
    EXPECT_LE(k.threads_per_block(), 256) << k.name;
    EXPECT_EQ(k.shared_bytes, 0) << k.name;
  }
}

TEST_P(CudaCodegenOpTest, RandomSchedulesGenerate) {
  auto w = ir::MakeWorkload(GetParam());
  ASSERT_TRUE(w.ok()) << w.status();
  for (uint64_t seed = 0; seed < 50; ++seed) {
    auto sch = RandomGpuSchedule(*w, seed);
    ASSERT_TRUE(sch.ok()) << sch.status();
    auto src = BuildCudaSource(*sch, "kernel");
    ASSERT_TRUE(src.ok()) << "seed " << seed << ": " << src.status() << "\n"
                          << ir::ToText(*codegen::Lower(*sch, "kernel"));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaCodegenOpTest, ::testing::ValuesIn(testing::OpTestSpecs()),
                         [](const auto& info) { return testing::OpTestName(info.param); });

TEST(CudaCodegenTest, MatmulDefaultPlan) {
  auto w = ir::MakeWorkload("matmul:m=17,n=31,k=13");
  ASSERT_TRUE(w.ok());
  auto sch = DefaultGpuSchedule(*w);
  ASSERT_TRUE(sch.ok()) << sch.status();
  auto src = BuildCudaSource(*sch, "mm");
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(ToText(src->plan),
            "plan mm(A, B, C)\n"
            "  kernel mm_k0 grid(3, 1, 1) block(256, 1, 1) shared 0 args(A, B, C)\n")
      << src->source;
  EXPECT_NE(src->source.find("const float* __restrict__ A"), std::string::npos);
  EXPECT_NE(src->source.find("float* __restrict__ C"), std::string::npos);
}

TEST(CudaCodegenTest, SoftmaxKernelsAndTemporaries) {
  auto w = ir::MakeWorkload("softmax:m=5,n=17");
  ASSERT_TRUE(w.ok());
  auto sch = DefaultGpuSchedule(*w);
  ASSERT_TRUE(sch.ok()) << sch.status();
  auto src = BuildCudaSource(*sch, "sm");
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(src->plan.kernels.size(), 3u) << ToText(src->plan);
  ASSERT_EQ(src->plan.temporaries.size(), 2u) << ToText(src->plan);
  EXPECT_EQ(src->plan.temporaries[0].bytes, 20);
  EXPECT_NE(src->source.find("LATHE_INF"), std::string::npos);  // max identity is -inf
  EXPECT_NE(src->source.find("expf("), std::string::npos);
}

TEST(CudaCodegenTest, UnboundNestIsRejected) {
  auto w = ir::MakeWorkload("matmul:m=4,n=4,k=4");
  ASSERT_TRUE(w.ok());
  ir::Schedule sch(*w, "cuda");
  auto src = BuildCudaSource(sch, "k");
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(src.status().message().find("not bound to GPU"), std::string::npos) << src.status();
}

// A shared stage computed inside a threadIdx loop holds what the whole block needs there (the
// lowering infers its region over the block's threads), filled by every thread between two
// barriers.
TEST(CudaCodegenTest, SharedStageInsideAThreadLoopCoversTheBlock) {
  auto w = ir::MakeWorkload("matmul:m=8,n=8,k=8");
  ASSERT_TRUE(w.ok());
  ir::Schedule sch(*w, "cuda");
  auto cr = sch.CacheRead("A", "shared", {"C"});
  ASSERT_TRUE(cr.ok());
  ASSERT_TRUE(sch.Bind("C", "i", "blockIdx.x").ok());
  ASSERT_TRUE(sch.Bind("C", "j", "threadIdx.x").ok());
  ASSERT_TRUE(sch.ComputeAt(*cr, "C", "j").ok());
  auto src = BuildCudaSource(sch, "k");
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ(src->plan.kernels.size(), 1u);
  // One row of A per block (8 floats), not one element per thread.
  EXPECT_EQ(src->plan.kernels[0].shared_bytes, 32) << src->source;
  EXPECT_NE(src->source.find("__syncthreads();"), std::string::npos) << src->source;
}

// A matmul on 16 x 16 threads of 2 x 2 outputs whose A is staged in shared memory per k-step
// of `k_step`, the tile filled by the block's 256 threads `fill_lanes` elements each (a
// vectorized loop when more than one).
ir::Schedule StagedMatmul(const std::string& spec, int64_t k_step, int64_t fill_lanes) {
  auto w = ir::MakeWorkload(spec);
  EXPECT_TRUE(w.ok()) << w.status();
  ir::Schedule sch(*w, "cuda");
  auto check = [](const absl::Status& st) { EXPECT_TRUE(st.ok()) << st; };
  auto cw = sch.CacheWrite("C", "local");
  auto as = sch.CacheRead("A", "shared", {*cw});
  auto i = sch.Split("C", "i", {16, 2});
  auto j = sch.Split("C", "j", {16, 2});
  check(sch.Reorder("C", {(*i)[0], (*j)[0], (*i)[1], (*j)[1], (*i)[2], (*j)[2]}));
  auto b = sch.Fuse("C", {(*i)[0], (*j)[0]});
  auto t = sch.Fuse("C", {(*i)[1], (*j)[1]});
  check(sch.Bind("C", *b, "blockIdx.x"));
  check(sch.Bind("C", *t, "threadIdx.x"));
  check(sch.ComputeAt(*cw, "C", *t));
  auto k = sch.Split(*cw, "k", {k_step});
  const ir::Stage* ls = sch.FindStage(*cw);
  check(sch.Reorder(*cw, {(*k)[0], (*k)[1], ls->leaves[0], ls->leaves[1]}));
  check(sch.ComputeAt(*as, *cw, (*k)[0]));
  auto f = sch.Fuse(*as, sch.FindStage(*as)->leaves);
  std::vector<int64_t> factors = {256};
  if (fill_lanes > 1) factors.push_back(fill_lanes);
  auto parts = sch.Split(*as, *f, factors);
  check(sch.Bind(*as, (*parts)[1], "threadIdx.x"));
  if (fill_lanes > 1) check(sch.Vectorize(*as, (*parts)[2]));
  return sch;
}

// Cooperative fetch where the threads compute: the fill's threadIdx loop runs inside the
// compute's (the same thread index), the shared tile is the block's, and barriers fence it
// inside the thread's own reduction loop.
TEST(CudaCodegenTest, CooperativeFetchInsideTheThreadLoop) {
  ir::Schedule sch = StagedMatmul("matmul:m=64,n=64,k=32", 8, 1);
  auto src = BuildCudaSource(sch, "k");
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ(src->plan.kernels.size(), 1u);
  EXPECT_EQ(src->plan.kernels[0].block[0], 256);
  // A 32-row by 8-column tile of A per k-step (what the block's 256 threads need), doubled:
  // the next k-step's tile is fetched while this one's is read.
  EXPECT_EQ(src->plan.kernels[0].shared_bytes, 2 * 32 * 8 * 4) << src->source;
  EXPECT_NE(src->source.find("_next = "), std::string::npos) << src->source;
}

// The GPU recipe makes float4 accesses and double buffering in lowering (gpu_passes.h), so
// the program the cost model featurizes is the one compiled: a 32x32 tile of A per k-step,
// filled 4 elements per thread (a float4 copy), doubled; the structural program has neither.
TEST(CudaCodegenTest, TheGpuRecipeLowersFloat4AccessesAndDoubledTiles) {
  ir::Schedule sch = StagedMatmul("matmul:m=64,n=64,k=64", 32, 4);

  auto gpu = codegen::Lower(sch, "k", codegen::LowerOptions::ForTarget(ir::TargetKind::kCuda));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::string text = ir::ToText(*gpu);
  // 32 x 32 elements, doubled; the fill a 4-lane copy into half k_next % 2.
  EXPECT_NE(text.find("alloc A.shared[2048] float32 shared"), std::string::npos) << text;
  EXPECT_NE(text.find("ramp("), std::string::npos) << text;
  EXPECT_NE(text.find("_next"), std::string::npos) << text;
  auto structural = codegen::Lower(sch, "k", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(structural.ok()) << structural.status();
  const std::string plain = ir::ToText(*structural);
  EXPECT_NE(plain.find("alloc A.shared[32, 32] float32 shared"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("ramp("), std::string::npos) << plain;

  // The emitter prints what it was given: float4 loads and stores, the doubled tile, one
  // barrier after the first fill and one ending each k-step.
  auto src = GenerateCuda(*gpu);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ(src->plan.kernels.size(), 1u);
  EXPECT_EQ(src->plan.kernels[0].shared_bytes, 2 * 32 * 32 * 4) << src->source;
  EXPECT_NE(src->source.find("*reinterpret_cast<float4*>(&A_shared["), std::string::npos)
      << src->source;
  EXPECT_NE(src->source.find("*reinterpret_cast<const float4*>(&A["), std::string::npos)
      << src->source;
  size_t barriers = 0;
  for (size_t at = src->source.find("__syncthreads();"); at != std::string::npos;
       at = src->source.find("__syncthreads();", at + 1)) {
    ++barriers;
  }
  EXPECT_EQ(barriers, 2u) << src->source;
  auto built = BuildCudaSource(sch, "k");
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->source, src->source);
}

TEST(CudaCodegenTest, FloorDivisionOfPossiblyNegativeOperandsUsesHelpers) {
  // Padded convolution indices subtract the padding: the generator must not use C division
  // where the operand may be negative.
  auto w = ir::MakeWorkload("conv2d:n=1,c=8,h=13,w=13,k=8,r=3,s=3,stride=2,pad=1,dilation=2");
  ASSERT_TRUE(w.ok());
  auto sch = DefaultGpuSchedule(*w);
  ASSERT_TRUE(sch.ok());
  auto src = BuildCudaSource(*sch, "k");
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_NE(src->prelude.find("lathe_floordiv"), std::string::npos);
}

TEST(CudaCodegenTest, LaunchLimitsRejectBeforeMeasurement) {
  LaunchPlan plan;
  plan.name = "p";
  KernelLaunch k;
  k.name = "p_k0";
  k.block[0] = 2048;
  plan.kernels.push_back(k);
  absl::Status st = CheckLaunchLimits(plan);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("2048 threads per block"), std::string::npos) << st;

  plan.kernels[0].block[0] = 1;
  plan.kernels[0].block[2] = 128;
  st = CheckLaunchLimits(plan);
  EXPECT_NE(st.message().find("block dimension z = 128"), std::string::npos) << st;

  plan.kernels[0].block[2] = 1;
  plan.kernels[0].shared_bytes = 64 * 1024;
  st = CheckLaunchLimits(plan);
  EXPECT_NE(st.message().find("65536 bytes of shared memory"), std::string::npos) << st;
  GpuLimits hopper;
  hopper.max_shared_per_block = 227 * 1024;
  EXPECT_TRUE(CheckLaunchLimits(plan, hopper).ok());

  // Dynamic shared memory (the pipelined templates): up to the opt-in limit with the static.
  plan.kernels[0].shared_bytes = 0;
  plan.kernels[0].dynamic_shared_bytes = 160 * 1024;
  EXPECT_TRUE(CheckLaunchLimits(plan).ok());
  EXPECT_NE(ToText(plan).find("dynamic 163840"), std::string::npos) << ToText(plan);
  plan.kernels[0].dynamic_shared_bytes = 228 * 1024;
  st = CheckLaunchLimits(plan);
  EXPECT_NE(st.message().find("233472 bytes of shared memory per block (233472 dynamic)"),
            std::string::npos)
      << st;
  plan.kernels[0].dynamic_shared_bytes = 0;
  plan.kernels[0].grid[1] = 70000;
  st = CheckLaunchLimits(plan);
  EXPECT_NE(st.message().find("grid dimension y = 70000"), std::string::npos) << st;
}

TEST(CudaCodegenTest, OversizedScheduleIsRejectedByLimits) {
  auto w = ir::MakeWorkload("matmul:m=64,n=64,k=8");
  ASSERT_TRUE(w.ok());
  ir::Schedule sch(*w, "cuda");
  auto f = sch.Fuse("C", {"i", "j"});
  ASSERT_TRUE(f.ok());
  auto parts = sch.Split("C", *f, {2048});
  ASSERT_TRUE(parts.ok());
  ASSERT_TRUE(sch.Bind("C", (*parts)[0], "blockIdx.x").ok());
  ASSERT_TRUE(sch.Bind("C", (*parts)[1], "threadIdx.x").ok());
  auto src = BuildCudaSource(sch, "k");
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(CheckLaunchLimits(src->plan).code(), absl::StatusCode::kResourceExhausted);
}

TEST(CudaCodegenTest, ArchOfTarget) {
  auto arch_of = [](const std::string& text) {
    absl::StatusOr<ir::Target> t = ir::ParseTarget(text);
    EXPECT_TRUE(t.ok()) << text << ": " << t.status();
    return t.ok() ? ArchOfTarget(*t) : absl::StatusOr<std::string>(t.status());
  };
  EXPECT_EQ(*arch_of("cuda:sm_80"), "sm_80");
  EXPECT_FALSE(arch_of("cuda:0").ok());
  EXPECT_FALSE(arch_of("cuda-emu:sm_90").ok());
  EXPECT_FALSE(arch_of("cpu").ok());
  EXPECT_FALSE(ir::ParseTarget("cuda:sm_x").ok());
}

}  // namespace
}  // namespace lathe::codegen::cuda
