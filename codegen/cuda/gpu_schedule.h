// \file
// GPU schedules and launch limits: the untuned default schedule of a workload (every stage's
// spatial loops fused and spread over blocks of up to 256 threads), a seeded random GPU
// schedule generator for tests (multi-level tiling with vthreads, local accumulation, shared
// memory staging with cooperative fetch), and the device limit check that rejects a launch
// plan before anything is measured.
#ifndef LATHE_CODEGEN_CUDA_GPU_SCHEDULE_H_
#define LATHE_CODEGEN_CUDA_GPU_SCHEDULE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codegen/cuda/cuda_codegen.h"
#include "ir/schedule.h"
#include "ir/workload.h"

namespace lathe::codegen::cuda {

// The default GPU schedule: injective non-output "pad" stages are inlined; every other stage
// has its spatial loops fused and split by 256 (or the fused extent when smaller), bound to
// blockIdx.x / threadIdx.x; reduce loops stay serial inside the thread. The schedule's
// target is "cuda".
absl::StatusOr<ir::Schedule> DefaultGpuSchedule(const ir::Workload& w);

// A random valid GPU schedule, deterministic in `seed`. Reductions get either multi-level
// tiling (block / vthread / thread / inner spatial tiles, split reduce loops, accumulation in
// a "local" cache stage at the thread loop) or shared-memory staging (inputs cached in
// "shared" at the outer reduce loop, fetched cooperatively by all threads of the block);
// other stages get a fused, split and bound elementwise mapping. Fails only on an internal
// inconsistency (a primitive refused that the generator believed valid).
absl::StatusOr<ir::Schedule> RandomGpuSchedule(const ir::Workload& w, uint64_t seed);

// Per-device launch limits (defaults: every NVIDIA GPU since sm_70 without opt-in shared
// memory).
struct GpuLimits {
  int64_t max_threads_per_block = 1024;
  int64_t max_block[3] = {1024, 1024, 64};
  int64_t max_grid[3] = {2147483647, 65535, 65535};
  int64_t max_shared_per_block = 48 * 1024;  // static shared memory; 227 KiB opt-in on sm_90
};

// Checks every kernel of `plan` against `limits`; ResourceExhausted naming the kernel and
// the limit for the first violation (too many threads, a block or grid dimension too large,
// too much shared memory).
absl::Status CheckLaunchLimits(const LaunchPlan& plan, const GpuLimits& limits = {});

}  // namespace lathe::codegen::cuda

#endif  // LATHE_CODEGEN_CUDA_GPU_SCHEDULE_H_
