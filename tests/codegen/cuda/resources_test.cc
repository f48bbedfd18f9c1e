// ptxas's figures (parsed from NVRTC's verbose report), per-SM resources and occupancy, and the
// refusal of a program over the device's limits with those figures as the evidence.
#include "codegen/cuda/resources.h"

#include <gtest/gtest.h>

#include "codegen/cuda/nvrtc.h"

namespace lathe::codegen::cuda {
namespace {

constexpr char kReport[] = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a_k0' for 'sm_90'
ptxas info    : Function properties for a_k0
ptxas         .     8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 16384 bytes smem, 400 bytes cmem[0]
ptxas info    : Compile time = 16.106 ms
ptxas info    : Compiling entry function 'a_k1' for 'sm_90'
ptxas info    : Function properties for a_k1
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, 360 bytes cmem[0]
)";

TEST(ResourcesTest, ParsesEveryKernelOfAPtxasReport) {
  std::vector<KernelResources> r = ParsePtxasReport(kReport);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].name, "a_k0");
  EXPECT_EQ(r[0].registers, 128);
  EXPECT_EQ(r[0].barriers, 1);
  EXPECT_EQ(r[0].shared_bytes, 16384);
  EXPECT_EQ(r[0].stack_frame, 8);
  EXPECT_EQ(r[0].spill_stores, 12);
  EXPECT_EQ(r[0].spill_loads, 16);
  EXPECT_EQ(r[1].name, "a_k1");
  EXPECT_EQ(r[1].registers, 10);
  EXPECT_EQ(r[1].shared_bytes, 0);
  EXPECT_TRUE(ParsePtxasReport("nonsense\n").empty());
}

TEST(ResourcesTest, OccupancyNamesWhatLimitsIt) {
  auto h100 = SmResourcesFor("sm_90");
  ASSERT_TRUE(h100.ok());
  Occupancy o = OccupancyOf(*h100, 256, 128, 16384);
  EXPECT_EQ(o.blocks_per_sm, 2);
  EXPECT_EQ(o.limited_by, "registers");
  o = OccupancyOf(*h100, 256, 32, 100 * 1024);
  EXPECT_EQ(o.blocks_per_sm, 2);
  EXPECT_EQ(o.limited_by, "shared memory");
  o = OccupancyOf(*h100, 1024, 16, 0);
  EXPECT_EQ(o.blocks_per_sm, 2);
  EXPECT_EQ(o.limited_by, "threads");
  o = OccupancyOf(*h100, 32, 16, 0);
  EXPECT_EQ(o.blocks_per_sm, 32);
  EXPECT_EQ(o.limited_by, "blocks");
  auto ga102 = SmResourcesFor("sm_86");
  ASSERT_TRUE(ga102.ok());
  EXPECT_EQ(OccupancyOf(*ga102, 1024, 16, 0).blocks_per_sm, 1);  // 1536 threads per SM
  EXPECT_FALSE(SmResourcesFor("gfx90a").ok());
}

TEST(ResourcesTest, OverTheLimitsIsRefusedWithPtxasFigures) {
  auto sm = SmResourcesFor("sm_90");
  ASSERT_TRUE(sm.ok());
  LaunchPlan plan;
  KernelLaunch k;
  k.name = "a_k0";
  k.block[0] = 1024;
  plan.kernels.push_back(k);
  std::vector<KernelResources> r = {{"a_k0", 128, 0, 0, 0, 16384, 1}};
  absl::Status st = CheckKernelResources(plan, r, *sm);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("uses 128 registers per thread (ptxas) x 1024 threads = 131072"),
            std::string::npos)
      << st;
  plan.kernels[0].block[0] = 256;
  EXPECT_TRUE(CheckKernelResources(plan, r, *sm).ok());
  r[0].shared_bytes = 64 * 1024;
  st = CheckKernelResources(plan, r, *sm);
  EXPECT_NE(st.message().find("65536 bytes of static shared memory (ptxas)"), std::string::npos)
      << st;
  EXPECT_EQ(CheckKernelResources(plan, {}, *sm).code(), absl::StatusCode::kInvalidArgument);
  r[0].shared_bytes = 0;
  EXPECT_NE(ResourcesText(plan, r, *sm).find("a_k0: 256 threads, 128 registers, 0 bytes spilled"),
            std::string::npos);
}

TEST(ResourcesTest, NvrtcReportsWhatAKernelUses) {
  if (!HaveNvrtc()) GTEST_SKIP() << "this build has no NVRTC";
  auto c = CompileToCubinWithResources(
      "extern \"C\" __global__ void k(float* a) { __shared__ float s[1024]; "
      "s[threadIdx.x] = a[threadIdx.x]; __syncthreads(); a[threadIdx.x] = s[1023 - threadIdx.x]; }",
      "sm_80");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->kernels.size(), 1u);
  EXPECT_EQ(c->kernels[0].name, "k");
  EXPECT_GT(c->kernels[0].registers, 0);
  EXPECT_EQ(c->kernels[0].shared_bytes, 4096);
  EXPECT_EQ(c->kernels[0].barriers, 1);
  EXPECT_EQ(c->cubin.substr(0, 4),
            "\x7f"
            "ELF");
}

}  // namespace
}  // namespace lathe::codegen::cuda
