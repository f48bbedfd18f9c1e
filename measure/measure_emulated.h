// \file
// Measurement of GPU candidates on the `cuda-emu:sm_XX` device, in the measurement child: the
// trace is replayed and checked as `lathe verify` checks a schedule (gpuemu/verify.h: CUDA C,
// launch limits, NVRTC and ptxas's figures against the architecture, an emulated run on the
// worker's seeded inputs compared with the reference), then the emulated program is run again
// until min_repeat_ms. Its timings are the emulator's wall time: they rank nothing on a GPU
// and live under their own device class.
//
// Outcomes: no CUDA for the trace or a launch over the limits, or ptxas's figures over them:
// invalid_schedule (refused before anything runs); NVRTC or the host compiler refusing the
// text: compile_error; an illegal address, a sanitizer check or barrier divergence:
// runtime_error (the emulator is unharmed, the child goes on); a wrong output: wrong_answer.
// Without NVRTC or a host compiler: no_device. Test-only faults
// (TestFaultOf, measure_child.h): "crash", "hang", "wrong", and "illegal_access", which makes
// the candidate's kernels read its first input past its end.
#ifndef LATHE_MEASURE_MEASURE_EMULATED_H_
#define LATHE_MEASURE_MEASURE_EMULATED_H_

#include <string>
#include <vector>

#include "ir/trace.h"
#include "ir/workload.h"
#include "lathe/v1/measure.pb.h"

namespace lathe::measure {

// Measures `req` (whose trace is `trace`) for `arch` on the emulator, with the workload's
// inputs `args` (the last one the output's size) and `reference` output.
lathe::v1::MeasureResult MeasureEmulated(const lathe::v1::MeasureRequest& req,
                                         const ir::Workload& workload,
                                         const std::vector<std::vector<float>>& args,
                                         const std::vector<float>& reference,
                                         const ir::Trace& trace, const std::string& arch);

}  // namespace lathe::measure

#endif  // LATHE_MEASURE_MEASURE_EMULATED_H_
