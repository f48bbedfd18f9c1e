// NVRTC compilation of generated kernels to CUBIN for sm_80 and sm_90 (machine code, so
// register allocation and resource limits are validated too) and to PTX. No GPU needed.
// Random schedules of one op are compiled together in one NVRTC program (distinct kernel
// names after one prelude) to keep the suite fast.
#include <gtest/gtest.h>

#include <cctype>

#include "../op_specs.h"
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/gpu_schedule.h"
#include "codegen/cuda/nvrtc.h"

namespace lathe::codegen::cuda {
namespace {

#define SKIP_WITHOUT_NVRTC() \
  if (!HaveNvrtc()) GTEST_SKIP() << "this build has no NVRTC"

class CudaCompileOpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaCompileOpTest, DefaultScheduleCompilesToCubin) {
  SKIP_WITHOUT_NVRTC();
  auto w = ir::MakeWorkload(GetParam());
  ASSERT_TRUE(w.ok()) << w.status();
  auto sch = DefaultGpuSchedule(*w);
  ASSERT_TRUE(sch.ok()) << sch.status();
  auto src = BuildCudaSource(*sch, "kernel");
  ASSERT_TRUE(src.ok()) << src.status();
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = CompileToCubin(src->source, arch);
    ASSERT_TRUE(cubin.ok()) << arch << ": " << cubin.status() << "\n" << src->source;
    EXPECT_EQ(cubin->substr(0, 4),
              "\x7f"
              "ELF")
        << arch;
  }
}

// Generates `count` random schedules of `spec` that fit the default launch limits, compiles
// them together for sm_80 and sm_90, and checks every one generates and compiles.
void CompileRandomSchedules(const std::string& spec, int count) {
  auto w = ir::MakeWorkload(spec);
  ASSERT_TRUE(w.ok()) << w.status();
  std::string kernels;
  int valid = 0, rejected = 0;
  for (uint64_t seed = 0; valid < count && seed < 400; ++seed) {
    auto sch = RandomGpuSchedule(*w, seed);
    ASSERT_TRUE(sch.ok()) << sch.status();
    auto src = BuildCudaSource(*sch, "s" + std::to_string(seed));
    ASSERT_TRUE(src.ok()) << "seed " << seed << ": " << src.status();
    if (!CheckLaunchLimits(src->plan).ok()) {
      ++rejected;
      continue;
    }
    kernels += src->kernels;
    ++valid;
  }
  EXPECT_EQ(valid, count) << rejected << " schedules over the launch limits";
  std::string source = CudaPrelude() + kernels;
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = CompileToCubin(source, arch);
    ASSERT_TRUE(cubin.ok()) << arch << ": " << cubin.status().message().substr(0, 4000);
  }
}

TEST_P(CudaCompileOpTest, RandomSchedulesCompileToCubin) {
  SKIP_WITHOUT_NVRTC();
  CompileRandomSchedules(GetParam(), 10);
}

// The long variant (label e2e): 50 random schedules per workload.
class E2eCudaCompileOpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(E2eCudaCompileOpTest, FiftyRandomSchedulesCompileToCubin) {
  SKIP_WITHOUT_NVRTC();
  CompileRandomSchedules(GetParam(), 50);
}

INSTANTIATE_TEST_SUITE_P(Ops, E2eCudaCompileOpTest, ::testing::ValuesIn(testing::OpTestSpecs()),
                         [](const auto& info) { return testing::OpTestName(info.param); });

INSTANTIATE_TEST_SUITE_P(Ops, CudaCompileOpTest, ::testing::ValuesIn(testing::OpTestSpecs()),
                         [](const auto& info) { return testing::OpTestName(info.param); });

TEST(CudaCompileTest, PtxForVirtualArchitecture) {
  SKIP_WITHOUT_NVRTC();
  auto w = ir::MakeWorkload("softmax:m=5,n=17");
  ASSERT_TRUE(w.ok());
  auto sch = DefaultGpuSchedule(*w);
  ASSERT_TRUE(sch.ok());
  auto ptx = BuildPtx(*sch, "softmax_k", "sm_80");
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find(".target sm_80"), std::string::npos);
  EXPECT_NE(ptx->find(".entry softmax_k_k0"), std::string::npos);
  EXPECT_NE(ptx->find("// plan softmax_k"), std::string::npos);
}

TEST(CudaCompileTest, CompileErrorCarriesTheLog) {
  SKIP_WITHOUT_NVRTC();
  auto r = CompileToCubin("extern \"C\" __global__ void k() { undeclared_thing = 1; }", "sm_80");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("undeclared_thing"), std::string::npos) << r.status();
}

// The architectures ir::IsCudaArch accepts parse (three-digit ones and feature suffixes
// included); anything else is an error naming it.
TEST(CudaCompileTest, ArchitecturesParseAsTheTargetAcceptsThem) {
  for (const auto& [arch, digits] :
       std::vector<std::pair<std::string, std::string>>{{"sm_80", "80"},
                                                        {"sm_90a", "90a"},
                                                        {"sm_100", "100"},
                                                        {"sm_100a", "100a"},
                                                        {"sm_120f", "120f"},
                                                        {"compute_86", "86"}}) {
    auto d = ParseArch(arch);
    ASSERT_TRUE(d.ok()) << arch << ": " << d.status();
    EXPECT_EQ(*d, digits);
  }
  for (const std::string bad : {"sm_8", "sm_1000", "sm_80x", "sm_90aa", "sm_", "gfx90a", "sm_a0"}) {
    auto d = ParseArch(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find(bad), std::string::npos) << d.status();
  }
}

TEST(CudaCompileTest, BadArchitectureIsRejected) {
  auto r = CompileToPtx("", "gfx90a");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gfx90a"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace lathe::codegen::cuda
