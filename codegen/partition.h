// \file
// Loop versioning for guards: a tile that does not divide its loop leaves guards (bounds
// checks, padding selects) in the innermost body although only the last iterations of the
// tile loop need them. For each serial or parallel loop whose body holds such a guard, this
// pass finds the iterations on which every guard that depends on the loop is provably true
// and emits
//
//   for v in ... { if (lo <= v && v <= hi) { body, guards dropped } else { body } }
//
// The check runs once per iteration of a loop that holds other loops, so it costs nothing in
// the hot loops, which lose their branches and masks. Runs on the lowered function before
// vectorization, as step 2 of Lower()'s CPU recipe (lower.h); the cost model featurizes the
// versioned program. LowerOptions::partition turns it off (bench_gemm --no-partition times
// its effect).
#ifndef LATHE_CODEGEN_PARTITION_H_
#define LATHE_CODEGEN_PARTITION_H_

#include "ir/stmt.h"

namespace lathe::codegen {

struct PartitionOptions {
  // Versioned loops on one path from the root (each one doubles the code below it).
  int max_depth = 3;
  // Versioned loops in the whole function.
  int max_loops = 8;
  // The guard-free range must cover at least this share of the loop's iterations.
  double min_clean_share = 0.5;
  // Version the loops inside the guarded copies too. Off by default: those copies run for
  // the few tail iterations, and each level doubles the code LLVM compiles (a conv with a
  // fused row tail and a column tail compiled 2.8x slower with them versioned).
  bool version_slow_copies = false;
  // Guards failing on a loop's first and last iterations only (padding on both sides): those
  // two iterations peeled into copies with the variable a constant (Partitioner::PeelBorders).
  bool peel_borders = true;
};

ir::Stmt PartitionLoops(const ir::Stmt& s, const PartitionOptions& options = {});

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_PARTITION_H_
