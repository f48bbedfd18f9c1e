// \file
// Lowering: a schedule becomes a loop program over flat buffers (ir::LoweredFunc), the
// program a backend compiles as it is and the cost model featurizes as it is.
//
// The recipe (Lower() lists it, one pass per line):
//   1. structural lowering: bound inference (the region of each attached stage that its
//      consumers need inside its attachment loop, as symbolic minima and constant extents),
//      loop nests from split/fuse relations (with guards where a split does not divide its
//      extent), reduction init placed before the first reduce loop, storage (each
//      intermediate stage gets a compact buffer sized by its region, allocated where it is
//      attached), flattening of accesses to row-major indices, and simplification;
//   1b. accumulations of zero-padded products guarded instead (SkipZeroTaps, zero_taps.h), CPU
//      targets: the guards that are constants or rise above the unrolled code;
//   2. loop versioning for guards (PartitionLoops, partition.h), CPU targets;
//   2b. SkipZeroTaps again: the guards that versioning made constants (a peeled border tile);
//   3. vectorization of loops marked kVectorized (VectorizeLoops), CPU targets;
//   4. 4-lane (float4) accesses where alignment is provable (VectorizeGpuAccesses,
//      gpu_passes.h), GPU targets;
//   5. double buffering of shared tiles (DoubleBufferSharedTiles), GPU targets.
// The CUDA backend keeps its guards (a thread's tail is not a loop to version) and the
// vectorized loops step 4 leaves (it unrolls them): its recipe is steps 1, 4 and 5.
#ifndef LATHE_CODEGEN_LOWER_H_
#define LATHE_CODEGEN_LOWER_H_

#include <string>

#include "absl/status/statusor.h"
#include "codegen/partition.h"
#include "ir/schedule.h"
#include "ir/stmt.h"
#include "ir/target.h"

namespace lathe::codegen {

// Which passes follow structural lowering. The default is the CPU recipe.
struct LowerOptions {
  // Products of a padding's zeros guarded and lifted (SkipZeroTaps).
  bool skip_zero_taps = true;
  // Loop versioning for guards (PartitionLoops).
  bool partition = true;
  PartitionOptions partition_options;
  // Loops marked kVectorized become vector code (VectorizeLoops).
  bool vectorize = true;
  // GPU: 4-lane accesses (VectorizeGpuAccesses) and doubled shared tiles
  // (DoubleBufferSharedTiles).
  bool gpu_vectorize = false;
  bool double_buffer = false;

  // The recipe of programs for `kind`: steps 1-3 for CPU targets, steps 1, 4 and 5 for CUDA
  // (and the CUDA emulator, which runs the CUDA backend's code).
  static LowerOptions ForTarget(ir::TargetKind kind);
  // Structural lowering alone (step 1): for tests and tools that look at one pass.
  static LowerOptions StructuralOnly();
};

// Lowers `sch` into a function named `name` whose arguments are the workload's tensors in
// CONTRACT.md order, by the recipe `options` selects. Fails with InvalidArgument when the
// schedule cannot be realised (for example a compute_at whose loop was split afterwards),
// naming the stage and loop.
absl::StatusOr<ir::LoweredFunc> Lower(const ir::Schedule& sch, const std::string& name,
                                      const LowerOptions& options = {});

// Rewrites loops marked kVectorized into vector code (Ramp/Broadcast, masked loads and stores
// for guarded lanes). A loop that cannot be vectorized (its body holds a reduction across
// lanes, an allocation, or a non-constant extent) becomes an unrolled or serial loop instead.
ir::Stmt VectorizeLoops(const ir::Stmt& s);

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_LOWER_H_
