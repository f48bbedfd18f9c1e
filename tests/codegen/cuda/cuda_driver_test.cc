// The CUDA driver loaded with dlopen: without a driver it fails clearly; with one (label
// `gpu`), generated kernels agree with the CPU reference, time with events, and an illegal
// access is reported as a sticky error.
#include "codegen/cuda/cuda_driver.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "../op_specs.h"
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/gpu_schedule.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/cuda/resources.h"
#include "ir/check.h"
#include "ir/reference.h"

namespace lathe::codegen::cuda {
namespace {

TEST(CudaDriverTest, MissingDriverFailsClearly) {
  auto d = CudaDriver::Get();
  if (d.ok()) GTEST_SKIP() << "this machine has a CUDA driver";
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  if (d.status().message().find("cuInit") == std::string::npos) {
    EXPECT_EQ(d.status().message(),
              "no CUDA driver (libcuda.so.1 not found): this machine has no NVIDIA GPU driver");
  }
  // The same answer every time, and contexts fail the same way.
  EXPECT_EQ(CudaDriver::Get().status(), d.status());
  EXPECT_EQ(CudaContext::Create(0).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Skips the test unless a driver, a device and NVRTC are present; else sets `ctx` and `info`.
#define REQUIRE_GPU(ctx, info)                                            \
  auto driver_or = CudaDriver::Get();                                     \
  if (!driver_or.ok()) GTEST_SKIP() << driver_or.status().message();      \
  if (!HaveNvrtc()) GTEST_SKIP() << "this build has no NVRTC";            \
  auto count_or = (*driver_or)->DeviceCount();                            \
  if (!count_or.ok() || *count_or == 0) GTEST_SKIP() << "no CUDA device"; \
  auto ctx_or = CudaContext::Create(0);                                   \
  ASSERT_TRUE(ctx_or.ok()) << ctx_or.status();                            \
  auto info_or = (*driver_or)->Describe(0);                               \
  ASSERT_TRUE(info_or.ok()) << info_or.status();                          \
  CudaContext& ctx = **ctx_or;                                            \
  const DeviceInfo& info = *info_or

// Builds `sch`, runs it on seeded random inputs and compares with the reference.
absl::Status RunAndCheck(const CudaContext& ctx, const DeviceInfo& info, const ir::Schedule& sch,
                         uint64_t seed) {
  const ir::Workload& w = sch.workload();
  auto src = BuildCudaSource(sch, "kernel");
  if (!src.ok()) return src.status();
  if (auto st = CheckLaunchLimits(src->plan, info.limits); !st.ok()) return st;
  auto cubin = CompileToCubin(src->source, info.arch());
  if (!cubin.ok()) return cubin.status();
  auto prog = CudaProgram::Load(ctx, *cubin, src->plan);
  if (!prog.ok()) return prog.status();
  std::vector<std::vector<float>> args = ir::AllocateArgs(w);
  ir::FillRandomInputs(args, seed);
  std::vector<std::vector<float>> ref = args;
  if (auto st = ir::ComputeReference(w, ref); !st.ok()) return st;
  std::vector<DeviceBuffer> bufs;
  std::vector<uint64_t> ptrs;
  for (auto& a : args) {
    auto b = DeviceBuffer::Allocate(ctx, static_cast<int64_t>(a.size() * 4));
    if (!b.ok()) return b.status();
    if (auto st = b->CopyFromHost(a.data(), a.size() * 4); !st.ok()) return st;
    ptrs.push_back(b->ptr());
    bufs.push_back(std::move(*b));
  }
  float poison = 12345.0f;
  uint32_t bits;
  std::memcpy(&bits, &poison, 4);
  if (auto st = bufs.back().Fill32(bits); !st.ok()) return st;  // catch unwritten elements
  if (auto st = (*prog)->Run(ptrs); !st.ok()) return st;
  if (auto st = bufs.back().CopyToHost(args.back().data(), args.back().size() * 4); !st.ok()) {
    return st;
  }
  return ir::CheckOutput(args.back(), ref.back(), w.output()->shape);
}

class GpuRunTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuRunTest, DefaultAndRandomSchedulesAgreeWithReference) {
  REQUIRE_GPU(ctx, info);
  auto w = ir::MakeWorkload(GetParam());
  ASSERT_TRUE(w.ok());
  auto sch = DefaultGpuSchedule(*w);
  ASSERT_TRUE(sch.ok());
  absl::Status st = RunAndCheck(ctx, info, *sch, 1);
  ASSERT_TRUE(st.ok()) << "default: " << st;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto r = RandomGpuSchedule(*w, seed);
    ASSERT_TRUE(r.ok()) << r.status();
    st = RunAndCheck(ctx, info, *r, seed + 2);
    if (absl::IsResourceExhausted(st)) continue;  // over this device's limits
    ASSERT_TRUE(st.ok()) << "seed " << seed << ": " << st << "\n"
                         << BuildCudaText(*r, "kernel").value_or("");
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, GpuRunTest, ::testing::ValuesIn(testing::OpTestSpecs()),
                         [](const auto& info) { return testing::OpTestName(info.param); });

TEST(GpuDeviceTest, DescribesDeviceAndTimesWithEvents) {
  REQUIRE_GPU(ctx, info);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.cc_major, 7);
  EXPECT_GT(info.sm_count, 0);
  EXPECT_EQ(info.limits.max_threads_per_block, 1024);
  auto w = ir::MakeWorkload("matmul:m=256,n=256,k=256");
  ASSERT_TRUE(w.ok());
  auto sch = DefaultGpuSchedule(*w);
  ASSERT_TRUE(sch.ok());
  auto src = BuildCudaSource(*sch, "mm");
  ASSERT_TRUE(src.ok());
  auto cubin = CompileToCubin(src->source, info.arch());
  ASSERT_TRUE(cubin.ok()) << cubin.status();
  auto prog = CudaProgram::Load(ctx, *cubin, src->plan);
  ASSERT_TRUE(prog.ok()) << prog.status();
  std::vector<DeviceBuffer> bufs;
  std::vector<uint64_t> ptrs;
  for (const ir::Tensor& t : w->args) {
    int64_t n = 1;
    for (int64_t d : t->shape) n *= d;
    auto b = DeviceBuffer::Allocate(ctx, n * 4);
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE(b->Fill32(0).ok());
    ptrs.push_back(b->ptr());
    bufs.push_back(std::move(*b));
  }
  auto ms = (*prog)->Time(ptrs, 5);
  ASSERT_TRUE(ms.ok()) << ms.status();
  ASSERT_EQ(ms->size(), 5u);
  for (double t : *ms) EXPECT_GT(t, 0.0);
  EXPECT_EQ((*prog)->Launch({}).code(), absl::StatusCode::kInvalidArgument);
}

// A plan of one kernel `name` reading one argument `arg`, with `threads` threads in one block.
LaunchPlan OneKernelPlan(const std::string& name, const std::string& arg, int64_t threads = 1) {
  LaunchPlan plan;
  plan.name = name;
  plan.args = {arg};
  KernelLaunch k;
  k.name = name + "_k0";
  k.args = {arg};
  k.block[0] = threads;
  plan.kernels.push_back(k);
  return plan;
}

// The driver's figures for a loaded kernel are what ptxas reported when NVRTC forwarded its
// report (the measure child falls back on them when it does not).
TEST(GpuDeviceTest, LoadedKernelsReportTheResourcesPtxasReports) {
  REQUIRE_GPU(ctx, info);
  std::string src = CudaPrelude() +
                    "extern \"C\" __global__ void res_k0(float* __restrict__ a) {\n"
                    "  __shared__ float s[1024];\n"
                    "  s[threadIdx.x] = a[threadIdx.x];\n  __syncthreads();\n"
                    "  a[threadIdx.x] = s[1023 - threadIdx.x];\n}\n";
  auto cubin = CompileToCubinWithResources(src, info.arch());
  ASSERT_TRUE(cubin.ok()) << cubin.status();
  auto prog = CudaProgram::Load(ctx, cubin->cubin, OneKernelPlan("res", "a", 1024));
  ASSERT_TRUE(prog.ok()) << prog.status();
  auto used = (*prog)->Resources();
  ASSERT_TRUE(used.ok()) << used.status();
  ASSERT_EQ(used->size(), 1u);
  EXPECT_EQ((*used)[0].name, "res_k0");
  EXPECT_EQ((*used)[0].shared_bytes, 4096);
  EXPECT_GT((*used)[0].registers, 0);
  if (cubin->kernels.empty()) {
    std::printf("this NVRTC returned no ptxas report: driver figures only\n");
  } else {
    ASSERT_EQ(cubin->kernels.size(), 1u);
    EXPECT_EQ((*used)[0].registers, cubin->kernels[0].registers);
    EXPECT_EQ((*used)[0].shared_bytes, cubin->kernels[0].shared_bytes);
    EXPECT_EQ((*used)[0].stack_frame, cubin->kernels[0].stack_frame);
  }
}

TEST(GpuDeviceTest, IllegalAccessIsStickyAndTheNextProcessRecovers) {
  REQUIRE_GPU(ctx, info);
  (void)ctx;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The fault poisons the context of the process that made it: run it in a child.
  EXPECT_EXIT(
      {
        auto c = CudaContext::Create(0);
        if (!c.ok()) std::_Exit(3);
        std::string src = CudaPrelude() +
                          "extern \"C\" __global__ void bad_k0(float* __restrict__ p) {\n"
                          "  p[(long long)1 << 40] = 1.0f;\n}\n";
        auto cubin = CompileToCubin(src, info.arch());
        if (!cubin.ok()) std::_Exit(4);
        auto prog = CudaProgram::Load(**c, *cubin, OneKernelPlan("bad", "p"));
        if (!prog.ok()) std::_Exit(5);
        auto buf = DeviceBuffer::Allocate(**c, 16);
        if (!buf.ok()) std::_Exit(6);
        absl::Status st = (*prog)->Run({buf->ptr()});
        std::_Exit(IsStickyCudaError(st) ? 0 : 7);
      },
      ::testing::ExitedWithCode(0), "");
  // This process's context is untouched: a kernel still runs and agrees with the reference.
  auto w = ir::MakeWorkload("matmul:m=17,n=31,k=13");
  ASSERT_TRUE(w.ok());
  auto sch = DefaultGpuSchedule(*w);
  ASSERT_TRUE(sch.ok());
  absl::Status st = RunAndCheck(ctx, info, *sch, 3);
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace lathe::codegen::cuda
