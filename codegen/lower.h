// \file
// Lowering: a schedule becomes a loop program over flat buffers (ir::LoweredFunc).
//
// Steps, in order: bound inference (the region of each attached stage that its consumers
// need inside its attachment loop, as symbolic minima and constant extents), loop nests from
// split/fuse relations (with guards where a split does not divide its extent), reduction
// init placed before the first reduce loop, storage (each intermediate stage gets a compact
// buffer sized by its region, allocated where it is attached), flattening of accesses to
// row-major indices, and simplification.
#ifndef LATHE_CODEGEN_LOWER_H_
#define LATHE_CODEGEN_LOWER_H_

#include <string>

#include "absl/status/statusor.h"
#include "ir/schedule.h"
#include "ir/stmt.h"

namespace lathe::codegen {

// Lowers `sch` into a function named `name` whose arguments are the workload's tensors in
// CONTRACT.md order. Fails with InvalidArgument when the schedule cannot be realised (for
// example a compute_at whose loop was split afterwards), naming the stage and loop.
absl::StatusOr<ir::LoweredFunc> Lower(const ir::Schedule& sch, const std::string& name);

// Rewrites loops marked kVectorized into vector code (Ramp/Broadcast, masked loads and stores
// for guarded lanes). A loop that cannot be vectorized (its body holds a reduction across
// lanes, an allocation, or a non-constant extent) becomes an unrolled or serial loop instead.
ir::Stmt VectorizeLoops(const ir::Stmt& s);

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_LOWER_H_
