// Every op's generated GPU schedules run on the emulator and agree with the reference: the
// default schedule of every test workload (the CONTRACT ops and the model compiler's forms;
// compiled together, checked by NVRTC and ptxas against sm_90's limits too), and random GPU
// schedules, at least 50 per CONTRACT op and 10 per model op in the default suite (spread
// over the op's test workloads, compiled quickly; cuda_test compiles random schedules with
// NVRTC) and 50 per workload under the e2e label (NVRTC and ptxas as well).
// The schedules of one workload are compiled together: one host compile, one NVRTC program.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>

#include "../codegen/op_specs.h"
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/gpu_schedule.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/cuda/resources.h"
#include "gpuemu/host_compiler.h"
#include "gpuemu/verify.h"
#include "ir/trace.h"

namespace lathe::gpuemu {
namespace {

namespace cuda = codegen::cuda;

#define SKIP_WITHOUT_EMULATOR()                                               \
  if (auto cxx = FindHostCompiler(); !cxx.ok()) GTEST_SKIP() << cxx.status(); \
  if (!cuda::HaveNvrtc()) GTEST_SKIP() << "this build has no NVRTC"

std::string OpOf(const std::string& spec) { return spec.substr(0, spec.find(':')); }

// How many random schedules each workload of `spec`'s op in `specs` gets so that the op gets
// `per_op`.
int PerWorkload(const std::string& spec, int per_op,
                const std::vector<std::string>& specs = testing::OpTestSpecs()) {
  int n = 0;
  for (const std::string& s : specs) n += OpOf(s) == OpOf(spec);
  return (per_op + n - 1) / n;
}

// Every workload the CUDA backend is tested on: the CONTRACT ops and the forms the model
// compiler brings (more epilogues, transposed and broadcast matmuls, elementwise and
// data-movement ops, blocked layouts).
std::vector<std::string> AllSpecs() {
  std::vector<std::string> all = testing::OpTestSpecs();
  for (const std::string& s : testing::ModelOpTestSpecs()) all.push_back(s);
  return all;
}

// Schedules to verify together, each with its workload's reference data.
struct Case {
  std::string what;  // for failure messages
  const ReferenceData* data;
  ir::Trace trace;
  cuda::CudaSource src;
};

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// Compiles the cases together (with NVRTC and ptxas for sm_90 when `nvrtc`) and verifies each.
void VerifyTogether(const std::string& label, const std::vector<Case>& cases, bool nvrtc,
                    OptLevel opt) {
  std::string kernels;
  std::vector<KernelSignature> signatures;
  for (const Case& c : cases) {
    kernels += c.src.kernels;
    for (const KernelSignature& k : Signatures(c.src.plan)) signatures.push_back(k);
  }
  const std::string text = cuda::CudaPrelude() + kernels;
  auto t0 = std::chrono::steady_clock::now();
  double nvrtc_ms = 0;
  if (nvrtc) {
    auto cubin = cuda::CompileToCubinWithResources(text, "sm_90");
    ASSERT_TRUE(cubin.ok()) << cubin.status().message().substr(0, 4000);
    auto sm = cuda::SmResourcesFor("sm_90");
    for (const Case& c : cases) {
      absl::Status st = cuda::CheckKernelResources(c.src.plan, cubin->kernels, *sm);
      EXPECT_TRUE(st.ok()) << c.what << ": " << st;
    }
    nvrtc_ms = MsSince(t0);
  }
  auto module = EmuModule::Build(text, signatures, opt);
  ASSERT_TRUE(module.ok()) << module.status().message().substr(0, 4000);
  std::shared_ptr<EmuModule> shared = std::move(*module);
  auto t1 = std::chrono::steady_clock::now();
  for (const Case& c : cases) {
    VerifyReport r = VerifyCompiled(c.src, shared, *c.data);
    EXPECT_TRUE(r.ok()) << c.what << ": " << OutcomeName(r.outcome) << ": " << r.message << "\n"
                        << ir::TraceToText(c.trace) << "\n"
                        << c.src.kernels;
  }
  std::printf("%s: %zu schedules: nvrtc %.0f ms, host compile %.0f ms, emulation %.0f ms\n",
              label.c_str(), cases.size(), nvrtc_ms, shared->compile_ms(), MsSince(t1));
}

TEST(EmuOpsTest, EveryDefaultScheduleAgreesWithTheReference) {
  SKIP_WITHOUT_EMULATOR();
  std::vector<std::unique_ptr<ReferenceData>> data;
  std::vector<Case> cases;
  for (const std::string& spec : AllSpecs()) {
    auto w = ir::MakeWorkload(spec);
    ASSERT_TRUE(w.ok()) << w.status();
    auto d = MakeReferenceData(*w);
    ASSERT_TRUE(d.ok()) << d.status();
    data.push_back(std::make_unique<ReferenceData>(std::move(*d)));
    auto sch = cuda::DefaultGpuSchedule(*w);
    ASSERT_TRUE(sch.ok()) << sch.status();
    auto src = cuda::BuildCudaSource(*sch, "d" + std::to_string(cases.size()));
    ASSERT_TRUE(src.ok()) << spec << ": " << src.status();
    cases.push_back({spec, data.back().get(), sch->trace(), std::move(*src)});
  }
  VerifyTogether("default schedules", cases, /*nvrtc=*/true, OptLevel::kFast);
}

// `src` with every occurrence of `from` in its kernels replaced by `to`.
cuda::CudaSource Edited(cuda::CudaSource src, const std::string& from, const std::string& to) {
  std::string& k = src.kernels;
  for (size_t at = k.find(from); at != std::string::npos; at = k.find(from, at + to.size())) {
    k.replace(at, from.size(), to);
  }
  src.source = src.prelude + src.kernels;
  return src;
}

VerifyReport VerifyText(const cuda::CudaSource& src, const ReferenceData& data) {
  auto module = EmuModule::Build(src.source, Signatures(src.plan), OptLevel::kFast);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return {};
  return VerifyCompiled(src, std::move(*module), data);
}

// The emulator is a test that can fail: generated kernels broken by hand are caught.
TEST(EmuOpsTest, BrokenGeneratedKernelsAreCaught) {
  SKIP_WITHOUT_EMULATOR();
  auto w = ir::MakeWorkload("matmul:m=64,n=48,k=40,epilogue=bias");
  ASSERT_TRUE(w.ok());
  auto data = MakeReferenceData(*w);
  ASSERT_TRUE(data.ok());
  // A schedule whose threads stage inputs in shared memory together, fenced by barriers.
  std::optional<cuda::CudaSource> staged;
  for (uint64_t seed = 0; seed < 200 && !staged; ++seed) {
    auto sch = cuda::RandomGpuSchedule(*w, seed);
    ASSERT_TRUE(sch.ok());
    auto src = cuda::BuildCudaSource(*sch, "s");
    ASSERT_TRUE(src.ok());
    if (src->kernels.find("__syncthreads();") != std::string::npos &&
        src->plan.kernels[0].threads_per_block() >= 32 && cuda::CheckLaunchLimits(src->plan).ok()) {
      staged = std::move(*src);
    }
  }
  ASSERT_TRUE(staged.has_value());
  ASSERT_TRUE(VerifyText(*staged, *data).ok()) << staged->kernels;

  VerifyReport no_barrier = VerifyText(Edited(*staged, "__syncthreads();", ""), *data);
  EXPECT_EQ(no_barrier.outcome, Outcome::kWrongAnswer) << no_barrier.message;
  EXPECT_NE(no_barrier.message.find("first bad element ["), std::string::npos)
      << no_barrier.message;

  auto def = cuda::DefaultGpuSchedule(*w);
  ASSERT_TRUE(def.ok());
  auto src = cuda::BuildCudaSource(*def, "d");
  ASSERT_TRUE(src.ok());
  // Off by one in the bias index: a wrong answer whose first bad element is named.
  VerifyReport off_by_one = VerifyText(Edited(*src, "bias[", "bias[1 + "), *data);
  EXPECT_NE(off_by_one.outcome, Outcome::kOk);
  EXPECT_TRUE(off_by_one.outcome == Outcome::kWrongAnswer ||
              off_by_one.outcome == Outcome::kRuntimeError)
      << off_by_one.message;
  // Reading one row past A: an illegal address naming the buffer.
  VerifyReport oob = VerifyText(Edited(*src, "A[", "A[40 + "), *data);
  EXPECT_EQ(oob.outcome, Outcome::kRuntimeError) << oob.message;
  EXPECT_NE(oob.message.find("read of element 2560 of buffer 'A' (2560 elements): past its end"),
            std::string::npos)
      << oob.message;
}

// `count` random GPU schedules of `spec` (seeds from 0, skipping those over the launch
// limits).
void VerifyRandomSchedules(const std::string& spec, int count, bool nvrtc, OptLevel opt) {
  auto w = ir::MakeWorkload(spec);
  ASSERT_TRUE(w.ok()) << w.status();
  auto data = MakeReferenceData(*w);
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<Case> cases;
  for (uint64_t seed = 0; static_cast<int>(cases.size()) < count && seed < 1000; ++seed) {
    auto sch = cuda::RandomGpuSchedule(*w, seed);
    ASSERT_TRUE(sch.ok()) << sch.status();
    auto src = cuda::BuildCudaSource(*sch, "s" + std::to_string(seed));
    ASSERT_TRUE(src.ok()) << "seed " << seed << ": " << src.status();
    if (!cuda::CheckLaunchLimits(src->plan).ok()) continue;
    cases.push_back(
        {spec + " seed " + std::to_string(seed), &*data, sch->trace(), std::move(*src)});
  }
  ASSERT_EQ(static_cast<int>(cases.size()), count);
  VerifyTogether(spec, cases, nvrtc, opt);
}

class EmuOpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EmuOpTest, RandomSchedulesAgreeWithTheReference) {
  SKIP_WITHOUT_EMULATOR();
  VerifyRandomSchedules(GetParam(), PerWorkload(GetParam(), 50), /*nvrtc=*/false, OptLevel::kFast);
}

INSTANTIATE_TEST_SUITE_P(Ops, EmuOpTest, ::testing::ValuesIn(testing::OpTestSpecs()),
                         [](const auto& info) { return testing::OpTestName(info.param); });

// The model compiler's forms: 10 random schedules per op here, 50 per workload under e2e.
class EmuModelOpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EmuModelOpTest, RandomSchedulesAgreeWithTheReference) {
  SKIP_WITHOUT_EMULATOR();
  VerifyRandomSchedules(GetParam(), PerWorkload(GetParam(), 10, testing::ModelOpTestSpecs()),
                        /*nvrtc=*/false, OptLevel::kFast);
}

INSTANTIATE_TEST_SUITE_P(ModelOps, EmuModelOpTest, ::testing::ValuesIn(testing::ModelOpTestSpecs()),
                         [](const auto& info) { return testing::OpTestName(info.param); });

// The long variant (label e2e): 50 random schedules per workload, NVRTC and ptxas too.
class E2eEmuOpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(E2eEmuOpTest, FiftyRandomSchedulesAgreeWithTheReference) {
  SKIP_WITHOUT_EMULATOR();
  VerifyRandomSchedules(GetParam(), 50, /*nvrtc=*/true, OptLevel::kOptimized);
}

INSTANTIATE_TEST_SUITE_P(Ops, E2eEmuOpTest, ::testing::ValuesIn(AllSpecs()),
                         [](const auto& info) { return testing::OpTestName(info.param); });

}  // namespace
}  // namespace lathe::gpuemu
