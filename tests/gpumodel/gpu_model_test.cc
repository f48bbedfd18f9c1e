// Whole programs of the model compiler on the GPU emulator (and, in the `gpu`-labelled
// RealGpu tests, on GPU 0): every kernel generated as CUDA, the plan's device memory, the
// steps launched in order; outputs compared with the CPU executor's on the same inputs.
#include "gpumodel/gpu_model.h"

#include <unistd.h>

#include <random>

#include "codegen/cuda/gpu_schedule.h"
#include "db/database.h"
#include "gmock/gmock.h"
#include "gpuemu/host_compiler.h"
#include "graph_builder.h"
#include "gtest/gtest.h"
#include "ir/target.h"
#include "model/compile.h"
#include "model/plan.h"
#include "proto/trace_io.h"

namespace lathe::gpumodel {
namespace {

using model::GraphBuilder;
using model::Ints;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Conv + BatchNorm + hard-swish, a depthwise conv with a residual add, global pooling, a
// matmul with bias and a softmax: the shapes of PP-OCR cls in small.
model::Program SmallCnn() {
  GraphBuilder b;
  std::string x = b.Input("x", {1, 3, 12, 10});
  std::string y = b.Op("Conv", {x, b.Const("w", {8, 3, 3, 3}), b.Const("b", {8})},
                       {{"pads", Ints({1, 1, 1, 1})}, {"strides", Ints({2, 1})}});
  y = b.Op("BatchNormalization", {y, b.Const("g", {8}, 0.5, 1.5), b.Const("beta", {8}),
                                  b.Const("mean", {8}), b.Const("var", {8}, 0.5, 2)});
  std::string t = b.Op("Add", {y, b.Scalar("three", 3)});
  t = b.Op("Clip", {t, b.Scalar("zero", 0), b.Scalar("six", 6)});
  y = b.Op("Div", {b.Op("Mul", {y, t}), b.Scalar("six2", 6)});
  std::string d =
      b.Op("Conv", {y, b.Const("dw", {8, 1, 3, 3}), b.Const("db", {8})},
           {{"pads", Ints({1, 1, 1, 1})}, {"group", model::Attr{model::Attr::kInt, 8}}});
  y = b.Op("Add", {d, y});
  y = b.Op("GlobalAveragePool", {y});
  y = b.Op("Flatten", {y});
  y = b.Op("MatMul", {y, b.Const("fc", {8, 4})});
  y = b.Op("Add", {y, b.Const("fcb", {4})});
  y = b.Op("Softmax", {y});
  absl::StatusOr<model::Program> p = model::CompileGraph(b.Finish(y), model::CompileOptions());
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

struct Ran {
  std::vector<float> out;
  std::vector<std::string> origins;
  std::vector<double> step_seconds;
};

// Runs `p` on `device` with `schedules` on the inputs RunProgram uses.
absl::StatusOr<Ran> RunOn(const model::Program& p, std::unique_ptr<GpuDevice> device,
                          const model::ScheduleSource& schedules) {
  absl::StatusOr<model::Plan> plan = model::MakePlan(p);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::unique_ptr<GpuModel>> m =
      GpuModel::Create(*plan, schedules, std::move(device));
  if (!m.ok()) return m.status();
  std::vector<std::vector<float>> in;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-2, 2);
  for (const model::IoInfo& io : plan->inputs) {
    in.emplace_back(model::NumElements(io.shape));
    for (float& v : in.back()) v = dist(rng);
  }
  std::vector<const float*> ip;
  for (auto& v : in) ip.push_back(v.data());
  Ran r;
  r.out.assign(model::NumElements(plan->outputs[0].shape), -1.0f);
  float* op = r.out.data();
  if (absl::Status s = (*m)->Run(ip.data(), &op); !s.ok()) return s;
  // A second run on the same device memory gives the same answer (weights stay put).
  std::vector<float> again(r.out.size(), -2.0f);
  float* ap = again.data();
  if (absl::Status s = (*m)->RunProfiled(ip.data(), &ap, &r.step_seconds); !s.ok()) return s;
  if (again != r.out) return absl::InternalError("a second run gave another answer");
  r.origins = (*m)->origins();
  return r;
}

bool CanEmulate() { return gpuemu::FindHostCompiler().ok(); }

std::unique_ptr<model::ScheduleSource> DefaultGpu() {
  return model::DatabaseSchedules(nullptr, "", codegen::cuda::DefaultGpuSchedule);
}

TEST(GpuModelTest, SmallCnnOnTheEmulatorMatchesTheCpu) {
  if (!CanEmulate()) GTEST_SKIP() << "no host C++ compiler to emulate with";
  const model::Program p = SmallCnn();
  absl::StatusOr<std::unique_ptr<GpuDevice>> emu = OpenEmulatedGpu("sm_90");
  ASSERT_TRUE(emu.ok()) << emu.status();
  EXPECT_EQ((*emu)->device_class(), "cuda-emu:sm_90");
  absl::StatusOr<Ran> r = RunOn(p, *std::move(emu), *DefaultGpu());
  ASSERT_TRUE(r.ok()) << r.status();
  model::ExpectClose(r->out, model::RunProgram(p));
  ASSERT_EQ(r->step_seconds.size(), p.kernels.size());
  for (double s : r->step_seconds) EXPECT_GT(s, 0);
  for (const std::string& o : r->origins) EXPECT_EQ(o, "default");
}

// The emulator with NVRTC's check first: every kernel compiles for sm_90 and fits its limits.
TEST(GpuModelTest, KernelsCheckedByNvrtcRunOnTheEmulator) {
  if (!CanEmulate()) GTEST_SKIP() << "no host C++ compiler to emulate with";
  absl::StatusOr<std::unique_ptr<GpuDevice>> emu = OpenEmulatedGpu("sm_90", true);
  if (absl::IsFailedPrecondition(emu.status())) GTEST_SKIP() << emu.status().message();
  ASSERT_TRUE(emu.ok()) << emu.status();
  const model::Program p = SmallCnn();
  absl::StatusOr<Ran> r = RunOn(p, *std::move(emu), *DefaultGpu());
  ASSERT_TRUE(r.ok()) << r.status();
  model::ExpectClose(r->out, model::RunProgram(p));
}

TEST(GpuModelTest, ScheduleWithoutCudaFallsBackToTheGpuDefault) {
  if (!CanEmulate()) GTEST_SKIP() << "no host C++ compiler to emulate with";
  const model::Program p = SmallCnn();
  // Untouched (CPU) schedules bind nothing to blocks and threads: no CUDA for them.
  std::unique_ptr<model::ScheduleSource> untouched = model::DatabaseSchedules(nullptr, "", nullptr);
  absl::StatusOr<std::unique_ptr<GpuDevice>> emu = OpenEmulatedGpu("sm_90");
  ASSERT_TRUE(emu.ok()) << emu.status();
  absl::StatusOr<Ran> r = RunOn(p, *std::move(emu), *untouched);
  ASSERT_TRUE(r.ok()) << r.status();
  model::ExpectClose(r->out, model::RunProgram(p));
  for (const std::string& o : r->origins) EXPECT_THAT(o, StartsWith("gpu default (default: "));
}

// Tuning records of the device's class (random tiled GPU schedules: shared-memory staging,
// vthreads, cross-thread reductions) are what the kernels are built from; another class's are
// not.
TEST(GpuModelTest, RecordsOfTheDeviceClassAreUsed) {
  if (!CanEmulate()) GTEST_SKIP() << "no host C++ compiler to emulate with";
  const model::Program p = SmallCnn();
  absl::StatusOr<model::Plan> plan = model::MakePlan(p);
  ASSERT_TRUE(plan.ok()) << plan.status();
  char dir[] = "/tmp/lathe-gpumodel-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/tuning.db";
  {
    absl::StatusOr<std::unique_ptr<db::Database>> d = db::Database::Open(path);
    ASSERT_TRUE(d.ok()) << d.status();
    for (size_t i = 0; i < plan->kernels.size(); ++i) {
      absl::StatusOr<ir::Workload> w = ir::MakeWorkload(plan->kernels[i]);
      ASSERT_TRUE(w.ok()) << w.status();
      absl::StatusOr<ir::Schedule> sch = codegen::cuda::RandomGpuSchedule(*w, 11 + i);
      ASSERT_TRUE(sch.ok()) << sch.status();
      db::Record r;
      r.candidate_id = "test-" + std::to_string(i);
      r.workload = w->canonical;
      r.workload_key = w->key;
      r.device_class = "cuda-emu:sm_90";
      r.trace_json = traceio::TraceToJson(sch->trace());
      r.repeats_us = {10.0};
      r.median_us = 10.0;
      r.flops = w->flops;
      r.worker = "gpu_model_test";
      ASSERT_TRUE((*d)->Insert(r).ok());
    }
    std::unique_ptr<model::ScheduleSource> records =
        model::DatabaseSchedules(d->get(), "cuda-emu:sm_90", codegen::cuda::DefaultGpuSchedule);
    absl::StatusOr<std::unique_ptr<GpuDevice>> emu = OpenEmulatedGpu("sm_90");
    ASSERT_TRUE(emu.ok()) << emu.status();
    absl::StatusOr<Ran> r = RunOn(p, *std::move(emu), *records);
    ASSERT_TRUE(r.ok()) << r.status();
    model::ExpectClose(r->out, model::RunProgram(p));
    for (const std::string& o : r->origins) EXPECT_EQ(o, "record 10.0 us");

    std::unique_ptr<model::ScheduleSource> other =
        model::DatabaseSchedules(d->get(), "cuda-emu:sm_80", codegen::cuda::DefaultGpuSchedule);
    absl::StatusOr<std::vector<GpuKernel>> k =
        GenerateKernels(*plan, *other, codegen::cuda::GpuLimits{});
    ASSERT_TRUE(k.ok()) << k.status();
    for (const GpuKernel& g : *k) EXPECT_EQ(g.origin, "default");
  }
  for (const char* f : {"/tuning.db", "/tuning.db-wal", "/tuning.db-shm"}) {
    unlink((std::string(dir) + f).c_str());
  }
  rmdir(dir);
}

TEST(GpuModelTest, EveryKernelIsGeneratedWithinTheLimits) {
  const model::Program p = SmallCnn();
  absl::StatusOr<model::Plan> plan = model::MakePlan(p);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<std::vector<GpuKernel>> k =
      GenerateKernels(*plan, *DefaultGpu(), codegen::cuda::GpuLimits{});
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_EQ(k->size(), plan->kernels.size());
  for (size_t i = 0; i < k->size(); ++i) {
    // Kernels of distinct steps are named apart, so one module holds them all.
    EXPECT_THAT((*k)[i].source.kernels, HasSubstr("lathe_k" + std::to_string(i) + "_k0("));
  }
  // Launch limits that no kernel fits: the error names the op, the workload and the nodes.
  codegen::cuda::GpuLimits tiny;
  tiny.max_threads_per_block = 1;
  tiny.max_block[0] = 1;
  absl::StatusOr<std::vector<GpuKernel>> none = GenerateKernels(*plan, *DefaultGpu(), tiny);
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(none.status())) << none.status();
  EXPECT_THAT(none.status().message(), HasSubstr("has no GPU kernel here"));
  EXPECT_THAT(none.status().message(), HasSubstr("ONNX nodes"));
}

TEST(GpuModelTest, TargetsThatNameNoDeviceAreRefused) {
  absl::StatusOr<std::unique_ptr<GpuDevice>> cpu = OpenGpuDevice(*ir::ParseTarget("cpu"));
  EXPECT_TRUE(absl::IsInvalidArgument(cpu.status())) << cpu.status();
  absl::StatusOr<std::unique_ptr<GpuDevice>> arch = OpenGpuDevice(*ir::ParseTarget("cuda:sm_90"));
  EXPECT_TRUE(absl::IsInvalidArgument(arch.status())) << arch.status();
  EXPECT_THAT(arch.status().message(), HasSubstr("cuda-emu:sm_90"));
  EXPECT_FALSE(OpenEmulatedGpu("sm_1").ok());
}

// `gpu` label: GPU 0 through the driver (skips without one).
TEST(GpuModelTest, RealGpuMatchesTheCpu) {
  absl::StatusOr<std::unique_ptr<GpuDevice>> gpu = OpenCudaGpu(0);
  if (absl::IsFailedPrecondition(gpu.status())) GTEST_SKIP() << gpu.status().message();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::string device_class = (*gpu)->device_class();
  EXPECT_THAT(device_class, StartsWith("cuda:"));
  const model::Program p = SmallCnn();
  absl::StatusOr<Ran> r = RunOn(p, *std::move(gpu), *DefaultGpu());
  ASSERT_TRUE(r.ok()) << r.status();
  model::ExpectClose(r->out, model::RunProgram(p));
}

}  // namespace
}  // namespace lathe::gpumodel
