// The `cuda-emu:sm_XX` device: its selector and description, and the measurer's real child
// measuring GPU candidates on the emulator: an ok result with timings, a candidate that reads
// out of bounds classified as a runtime error while the child goes on (no restart), a wrong
// answer, and a clear FailedPrecondition where the emulator cannot run (no host compiler).
// Skips without the CUDA backend or a host C++ compiler.
#include <gtest/gtest.h>

#include "codegen/cuda/gpu_schedule.h"
#include "gpuemu/host_compiler.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "measure/measure_child.h"
#include "measure/measurer.h"
#include "proto/trace_io.h"
#include "tests/measure/fault_plan.h"
#include "worker/discovery.h"

namespace lathe::measure {
namespace {

// The worker's devices, which say how to measure on each (worker/discovery.h).
using worker::Device;
using worker::IsEmulatedDeviceClass;
using worker::MeasurerOptionsFor;
using worker::ParseDeviceSelector;
using worker::SelectDevices;

TEST(EmulatedDeviceTest, ParsesAndDescribesTheEmulatedGpu) {
  auto sel = ParseDeviceSelector("cuda-emu:sm_90");
  ASSERT_TRUE(sel.ok()) << sel.status();
  EXPECT_EQ(sel->kind, "cuda-emu");
  EXPECT_EQ(sel->arch, "sm_90");
  EXPECT_TRUE(ParseDeviceSelector("cuda-emu:sm_90a").ok());
  for (const char* bad : {"cuda-emu:", "cuda-emu:90", "cuda-emu:sm_x", "cuda-emu:sm_9"}) {
    auto s = ParseDeviceSelector(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find("cuda-emu:sm_XX"), std::string::npos) << s.status();
  }
  auto d = SelectDevices({"cuda-emu:sm_80", "cpu", "cuda-emu:sm_80"});
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 2u);
  const Device& emu = (*d)[0];
  EXPECT_EQ(emu.info.device_class(), "cuda-emu:sm_80");
  EXPECT_EQ(emu.info.kind(), "cuda-emu");
  EXPECT_TRUE(IsEmulatedDeviceClass(emu.info.device_class()));
  EXPECT_FALSE(IsEmulatedDeviceClass("cuda:NVIDIA H100 (sm_90)"));
  EXPECT_EQ(emu.can_measure, gpuemu::FindHostCompiler().ok()) << emu.why_not;
  EXPECT_EQ(MeasurerOptionsFor(emu, {}).emulated_arch, "sm_80");
}

class EmulatedMeasurerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto cxx = gpuemu::FindHostCompiler(); !cxx.ok()) GTEST_SKIP() << cxx.status();
  }
  std::unique_ptr<Measurer> NewMeasurer(std::vector<std::string> env = {}) {
    MeasurerOptions o;
    o.child_path = LATHE_MEASURE_BIN;
    o.timeout_s = 60;
    o.emulated_arch = "sm_90";
    o.child_env = {test_support::ProcessFaultPlan().Env()};
    for (std::string& e : env) o.child_env.push_back(std::move(e));
    auto m = Measurer::Create(o);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  static lathe::v1::MeasureRequest Request(const std::string& id, const std::string& fault = "") {
    auto w = ir::MakeWorkload("matmul:m=33,n=40,k=17,epilogue=bias");
    auto s = codegen::cuda::DefaultGpuSchedule(*w);
    lathe::v1::MeasureRequest r;
    r.set_candidate_id(id);
    r.set_workload(w->canonical);
    r.set_trace_json(traceio::TraceToJson(s->trace()));
    r.set_min_repeat_ms(2);
    test_support::ProcessFaultPlan().Add(id, fault);
    return r;
  }
};

TEST_F(EmulatedMeasurerTest, CandidateIsCheckedAndTimedOnTheEmulator) {
  auto m = NewMeasurer();
  ASSERT_NE(m, nullptr);
  auto r = m->Measure(Request("e1"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->error_class(), lathe::v1::OK) << r->error_msg();
  EXPECT_GE(r->repeats_us_size(), 3);
  EXPECT_GT(r->median_us(), 0);
  EXPECT_GT(r->compile_ms(), 0);
}

TEST_F(EmulatedMeasurerTest, OutOfBoundsReadIsAnErrorForThatCandidateAlone) {
  auto m = NewMeasurer();
  ASSERT_NE(m, nullptr);
  auto r = m->Measure(Request("oob", "illegal_access"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->error_class(), lathe::v1::RUNTIME_ERROR);
  EXPECT_NE(r->error_msg().find("illegal address"), std::string::npos) << r->error_msg();
  EXPECT_NE(r->error_msg().find("of buffer 'A' (561 elements): past its end"), std::string::npos)
      << r->error_msg();
  r = m->Measure(Request("next"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->error_class(), lathe::v1::OK) << r->error_msg();
  EXPECT_EQ(m->restarts(), 0) << "the emulator's child survives a candidate's fault";
  r = m->Measure(Request("wrong", "wrong"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->error_class(), lathe::v1::WRONG_ANSWER);
}

TEST_F(EmulatedMeasurerTest, NoHostCompilerIsAFailedPreconditionNamingTheDevice) {
  auto m = NewMeasurer({"LATHE_EMU_CXX=/nonexistent/c++"});
  ASSERT_NE(m, nullptr);
  auto r = m->Measure(Request("x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("cuda-emu:sm_90"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("LATHE_EMU_CXX"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace lathe::measure
