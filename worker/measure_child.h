// \file
// The measurement child's logic (run by the `lathe-measure` binary): reads MeasureRequest
// frames on `in_fd`, and for each replays the trace, lowers, JIT-compiles, checks the output
// against the naive reference on seeded random inputs (computed once per workload), times
// the kernel as DESIGN.md says (one warm-up call, repeats until min_repeat_ms, every repeat
// kept, median and coefficient of variation, roofline sanity check), and writes a
// MeasureResult frame on `out_fd`.
#ifndef LATHE_WORKER_MEASURE_CHILD_H_
#define LATHE_WORKER_MEASURE_CHILD_H_

#include "lathe/v1/measure.pb.h"

namespace lathe::worker {

// Serves requests until `in_fd` reaches end of file; returns the process exit status.
int RunMeasureChild(int in_fd, int out_fd);

// Measures one request in this process (what the child does for each frame).
lathe::v1::MeasureResult MeasureInProcess(const lathe::v1::MeasureRequest& request);

// The host's peak float32 throughput in GFLOP/s (vector lanes x 2 FMA units x 2 flops x
// cores x maximum clock), the bound above which a timing is a measurement error.
double HostPeakGflops();

}  // namespace lathe::worker

#endif  // LATHE_WORKER_MEASURE_CHILD_H_
