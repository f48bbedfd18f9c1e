// \file
// GPU schedules and launch limits: the untuned default schedule of a workload (every stage's
// spatial loops fused and spread over blocks of up to 256 threads), a seeded random GPU
// schedule generator for tests (multi-level tiling with vthreads, local accumulation, shared
// memory staging with cooperative fetch), and the device limit check that rejects a launch
// plan before anything is measured.
#ifndef LATHE_CODEGEN_CUDA_GPU_SCHEDULE_H_
#define LATHE_CODEGEN_CUDA_GPU_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

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

// A random valid GPU schedule, deterministic in `seed`: random decisions (SampleGpuDecisions'
// distribution) applied with the functions below. Reductions get multi-level tiling with
// local accumulation or shared-memory staging; other stages a fused, split and bound
// elementwise mapping. Fails only on an internal inconsistency (a primitive refused that the
// generator believed valid).
absl::StatusOr<ir::Schedule> RandomGpuSchedule(const ir::Workload& w, uint64_t seed);

// --- the GPU sketch rules, shared by RandomGpuSchedule and the tuner's GPU search space ---

// The stages of `sch` that are not inlined, producers first.
std::vector<std::string> GpuActiveStages(const ir::Schedule& sch);

// Per spatial axis of a tiled reduction: the vthread, thread and inner (per-thread) tile
// extents, outermost first; the block level takes what remains of the axis.
struct SpatialTile {
  int64_t vthread = 1;
  int64_t thread = 1;
  int64_t inner = 1;
};

// How one reduction stage is mapped (SSSRRSRS-style multi-level tiling).
struct ReductionTiling {
  enum class Kind {
    // Accumulation in registers: cache_write "local" computed at the fused thread loop; the
    // stage's copy is tiled block / vthread / thread / inner; the local stage's reduce loops
    // are split by `reduce_inner` and placed outside its spatial loops. Inputs in
    // `shared_inputs` are staged in shared memory as well: a k-tile per innermost outer
    // reduce step (the region the whole block needs), fetched cooperatively by its threads
    // (the register tile of a good hand-written GEMM: block tile, thread tile, k-tiles).
    kLocal,
    // Shared-memory staging: each input in `shared_inputs` is read through a "shared" copy
    // computed at the innermost outer reduce loop (outside the thread loops) and fetched
    // cooperatively by all threads of the block; the stage accumulates in place.
    kShared,
    // Cross-thread reduction (for few output elements with long reductions): rfactor of the
    // longest reduce axis by `rf_threads` into a "shared" partial-result stage whose factored
    // axis is bound to threadIdx.x, one output element per block, combined by thread 0.
    kCrossThread,
  };
  Kind kind = Kind::kLocal;
  std::vector<SpatialTile> spatial;        // per spatial axis (kLocal, kShared)
  std::vector<int64_t> reduce_inner;       // per reduce axis: inner split factor (>= 1)
  std::vector<std::string> shared_inputs;  // kLocal, kShared: placeholder tensors to stage
  bool unroll_inner = false;               // unroll the per-thread tile loops
  bool unroll_local = false;               // kLocal: unroll the accumulator's loops
  int64_t rf_threads = 32;                 // kCrossThread
  // kLocal, kShared: elements per thread and access of the cooperative fetch and of the
  // output's last axis (1, or 4: float4 where the code generator proves the alignment).
  int64_t vector = 1;
  // Shared copies stored with the dimensions their reader indexes by reduce variables alone
  // first (A[i,k] staged as [k][i]).
  bool reduce_major = false;
};

// Applies `t` to the reduction stage `stage` (untransformed). Fails with the primitive's
// status when the decisions do not fit the stage (wrong number of axes, bad factors).
absl::Status ApplyReductionTiling(ir::Schedule& sch, const std::string& stage,
                                  const ReductionTiling& t);

// The reduce axis a cross-thread reduction factors: the longest one (the last on ties);
// empty when the stage has no reduce axis.
std::string CrossThreadAxis(const ir::Stage& s);

// Fuses the spatial loops of `stage`, splits them by `threads` (and an optional unrolled
// per-thread `inner` factor when the extent has at least two of them) and binds the parts to
// blockIdx.x / threadIdx.x.
absl::Status ApplyElementwiseMapping(ir::Schedule& sch, const std::string& stage, int64_t threads,
                                     int64_t inner);

// The extents lowering gives the loops of split(extent, factors), outermost first: inner
// loops are clamped to what remains of the parent.
std::vector<int64_t> SplitExtents(int64_t extent, const std::vector<int64_t>& factors);

// Per-device launch limits (defaults: every NVIDIA GPU since sm_70 without opt-in shared
// memory).
struct GpuLimits {
  int64_t max_threads_per_block = 1024;
  int64_t max_block[3] = {1024, 1024, 64};
  int64_t max_grid[3] = {2147483647, 65535, 65535};
  int64_t max_shared_per_block = 48 * 1024;  // static shared memory; 227 KiB opt-in on sm_90
  int64_t max_shared_optin = 227 * 1024;     // static + dynamic, with the opt-in (sm_90)
  int64_t max_regs_per_thread = 255;
  int64_t max_regs_per_block = 64 * 1024;
};

// Checks every kernel of `plan` against `limits`; ResourceExhausted naming the kernel and
// the limit for the first violation (too many threads, a block or grid dimension too large,
// too much static shared memory, or static + dynamic over the opt-in limit).
absl::Status CheckLaunchLimits(const LaunchPlan& plan, const GpuLimits& limits = {});

}  // namespace lathe::codegen::cuda

#endif  // LATHE_CODEGEN_CUDA_GPU_SCHEDULE_H_
