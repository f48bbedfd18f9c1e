// \file
// One GPU schedule proven correct without a GPU: the CUDA C generated for it, its launch plan
// checked against the architecture's limits, the text compiled by NVRTC for the architecture
// with ptxas's figures (registers, spills, shared memory) checked against those limits, then
// the same text run on the emulator on seeded random inputs and its output compared with the
// naive reference (ir/check.h's rule). Behind `lathe verify` and the `cuda-emu` worker.
//
// Thread-safety: VerifySchedule may run concurrently on distinct ReferenceData.
#ifndef LATHE_GPUEMU_VERIFY_H_
#define LATHE_GPUEMU_VERIFY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/cuda/resources.h"
#include "gpuemu/program.h"
#include "ir/check.h"
#include "ir/schedule.h"
#include "ir/workload.h"

namespace lathe::gpuemu {

// The seed of the inputs every worker uses (measure/measure_child.cc).
inline constexpr uint64_t kInputSeed = 20261121;

// A workload's seeded inputs and its reference output, computed once and shared by every
// schedule verified against it.
struct ReferenceData {
  ir::Workload workload;
  std::vector<std::vector<float>> args;  // inputs, then the output's size (scratch)
  std::vector<float> reference;
};
absl::StatusOr<ReferenceData> MakeReferenceData(const ir::Workload& w, uint64_t seed = kInputSeed);

// The tolerance of schedules that may use TF32 tensor cores (`--gpu-math tf32`): TF32 keeps
// 10 mantissa bits (unit roundoff 2^-11 ~ 4.9e-4 per rounded operand), and ir/check.h's error
// is relative to the largest reference element, so a K-long sum of products whose errors
// partly cancel stays far below 5e-3 for the K of real layers, while a wrong fragment layout
// or a missed tile gives errors of order 1.
inline constexpr double kTf32Tolerance = 5e-3;

struct VerifyOptions {
  std::string arch = "sm_90";
  // ir/check.h's relative tolerance (kTf32Tolerance where TF32 is allowed).
  double tolerance = ir::kDefaultTolerance;
  // Skip NVRTC and ptxas (tests that check many schedules compile them together instead).
  bool skip_nvrtc = false;
  // Test-only: every read of the first argument in the kernels' text is moved past its end,
  // as a candidate that reads out of bounds would (after NVRTC has checked the real text).
  bool test_read_past_first_input = false;
};

enum class Outcome {
  kOk,
  kInvalidSchedule,  // no CUDA for it, or its launch over the architecture's limits
  kCompileError,     // NVRTC or the host compiler refused the text
  kOverLimits,       // ptxas's figures over the architecture's limits
  kRuntimeError,     // an illegal address, a sanitizer check, barrier divergence
  kWrongAnswer,
  kUnavailable,  // this machine cannot emulate (no host compiler, no NVRTC)
};
const char* OutcomeName(Outcome o);

struct VerifyReport {
  Outcome outcome = Outcome::kOk;
  std::string message;  // why, when not ok
  codegen::cuda::LaunchPlan plan;
  std::vector<codegen::cuda::KernelResources> resources;  // ptxas's figures
  std::string resources_text;                             // codegen::cuda::ResourcesText
  double nvrtc_ms = 0, host_compile_ms = 0, run_ms = 0;
  ir::CompareResult compare;
  // When ok: the program and its buffers (arguments in order), for more (timed) runs.
  std::unique_ptr<EmuProgram> program;
  std::vector<std::unique_ptr<EmuBuffer>> buffers;
  bool ok() const { return outcome == Outcome::kOk; }
};

// Verifies `sch` (a schedule of data.workload) for `options.arch`. Never fails: every outcome
// is in the report.
VerifyReport VerifySchedule(const ir::Schedule& sch, const ReferenceData& data,
                            const VerifyOptions& options = {});

// The same for a schedule whose kernels are already compiled into `module` (together with
// those of other schedules) from `src`; NVRTC is skipped (compile such batches with NVRTC
// once as well).
VerifyReport VerifyCompiled(const codegen::cuda::CudaSource& src, std::shared_ptr<EmuModule> module,
                            const ReferenceData& data, const VerifyOptions& options = {});

// Runs an ok report's program once more on its buffers; milliseconds of wall time.
absl::StatusOr<double> RunAgain(VerifyReport& report);

}  // namespace lathe::gpuemu

#endif  // LATHE_GPUEMU_VERIFY_H_
