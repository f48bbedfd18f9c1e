// \file
// The measurement child's logic (run by the `lathe-measure` binary): reads MeasureRequest
// frames on `in_fd`, and for each replays the trace, lowers, JIT-compiles, checks the output
// against the naive reference on seeded random inputs (computed once per workload), times
// the kernel as DESIGN.md says (one warm-up call, repeats until min_repeat_ms, every repeat
// kept, median and coefficient of variation, roofline sanity check), and writes a
// MeasureResult frame on `out_fd`.
//
// Requests whose trace targets "cuda" are measured on the GPU named by ChildOptions::gpu_ordinal
// (`lathe-measure --gpu N`, default 0; one child per GPU, the parent chooses): the trace is lowered
// to CUDA C, checked against the device's launch limits (invalid_schedule), compiled by NVRTC for
// the device's architecture (compile_error), refused when ptxas's figures (registers, shared
// memory) exceed what the device can launch (invalid_schedule, naming them), loaded with the
// dlopen'd driver, run on the same seeded inputs and checked against the CPU reference, then timed
// with CUDA events (warm-up, repeats until min_repeat_ms, 50 ms by default), the L2 cache flushed
// before each timed run when flush_cache is set (a buffer twice the L2 size is overwritten). A
// sticky CUDA error (illegal address, launch failure) is reported as runtime_error and the child
// exits after answering: its context is unusable. Without a driver or device the result is
// no_device, its message naming the device and the cause (the Measurer turns that into a
// FailedPrecondition status). Test-only fault "illegal_access" makes the kernel store out of
// bounds. When ChildOptions::emulated_arch names an architecture ("sm_90", `lathe-measure
// --emulate sm_90`), cuda requests are measured on the GPU emulator instead
// (measure_emulated.h), without a GPU.
#ifndef LATHE_MEASURE_MEASURE_CHILD_H_
#define LATHE_MEASURE_MEASURE_CHILD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/workload.h"
#include "lathe/v1/measure.pb.h"

namespace lathe::measure {

// What one child measures on, fixed for its life (the Measurer passes it on the command line).
struct ChildOptions {
  int gpu_ordinal = 0;        // cuda requests: this GPU
  std::string emulated_arch;  // non-empty ("sm_90"): cuda requests on the GPU emulator instead
};

// `lathe-measure`'s command line: [--gpu N] [--emulate sm_XX]. A malformed one is an
// InvalidArgument naming the argument.
absl::StatusOr<ChildOptions> ParseChildArgs(const std::vector<std::string>& args);
// The command line that ParseChildArgs reads back as `options`.
std::vector<std::string> ChildArgs(const ChildOptions& options);

// Serves requests until `in_fd` reaches end of file; returns the process exit status.
int RunMeasureChild(int in_fd, int out_fd, const ChildOptions& options = {});

// Measures one request in this process (what the child does for each frame).
lathe::v1::MeasureResult MeasureInProcess(const lathe::v1::MeasureRequest& request,
                                          const ChildOptions& options = {});

// Test-only fault injection, outside the measurement protocol: when $LATHE_TEST_FAULTS names a
// file (a test's fault plan: lines "CANDIDATE_ID FAULT"), the fault planned for this candidate:
// "crash" (SIGSEGV), "hang" (sleep forever), "wrong" (perturb the output), "illegal_access"
// (GPU and emulated GPU: read or write far outside the buffers). Empty otherwise, and always
// without the variable. The file is read at each call, so that a test may plan faults for
// candidates it sees only while the child runs.
std::string TestFaultOf(const std::string& candidate_id);

// Fills the timing fields of `r` from the repeats (microseconds, at least one): every repeat,
// the median and the coefficient of variation.
void SetTimings(const std::vector<double>& us, lathe::v1::MeasureResult* r);

// The arguments that MeasureRequest.cold_weights evicts before each timed call: those a model
// holds as constants (a convolution's weights W, a panel matmul's packed B, an epilogue's
// bias / scale / shift, layer norm's gamma and beta), as indices into Workload::args. Never
// the first input or the output; an epilogue's `res` is an activation and stays.
std::vector<size_t> ParameterArgs(const ir::Workload& w);

// Evicts the `count` floats at `p` from every cache level of every core (what cold_weights does
// to each parameter before a timed call); elsewhere than x86 the whole hierarchy is flushed.
void Evict(const float* p, size_t count);

// The host's peak float32 throughput in GFLOP/s (vector lanes x 2 FMA units x 2 flops x
// cores x maximum clock), the bound above which a timing is a measurement error.
double HostPeakGflops();

}  // namespace lathe::measure

#endif  // LATHE_MEASURE_MEASURE_CHILD_H_
