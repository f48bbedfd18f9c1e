// \file
// Products with a padded operand skipped where the padding is: a convolution or pool whose
// padding is inlined accumulates `acc = acc + select(c, x, 0) * w`, and on the border of the
// image (a tile's first and last columns, the first and last rows) the selected side is the
// zero. Computed as written, every border tap costs a multiply-add of zero: for a 3x3
// window over a 7x7 image 22 % of the convolution's multiply-adds (oneDNN's kernels skip
// them). This pass rewrites such accumulations into
//
//   if (c) acc = acc + x * w
//
// and lifts each guard out of the loops it does not depend on (a row's validity rises to
// the loop over the window's rows). Inside unrolled loops the guard is a constant once code
// generation unrolls them, and the products of the padding vanish from the code; at a
// serial loop it is one branch per iteration of a body of many products. A condition that
// would be neither (it reads a loop that varies inside the hot code, or a vectorized loop's
// lanes) stays a select: a branch per product costs more than the select.
//
// The rewrite takes the padding's product as zero whatever the other factor is: a weight that
// is infinite or NaN times a padded zero gives NaN in the definition and nothing here, as in
// oneDNN's and OpenVINO's kernels. Runs on the lowered function before loop versioning and
// again after it (steps 1b and 2b of Lower()'s CPU recipe, lower.h): versioning peels a tile
// loop's border iterations into copies where the tile is a constant, and the second run turns
// their selects into guards that fold.
#ifndef LATHE_CODEGEN_ZERO_TAPS_H_
#define LATHE_CODEGEN_ZERO_TAPS_H_

#include "ir/stmt.h"

namespace lathe::codegen {

// `padded` (optional) is set when `s` accumulates a padding's products at all (whether or not
// any became a guard): without them a second run has nothing to do.
ir::Stmt SkipZeroTaps(const ir::Stmt& s, bool* padded = nullptr);

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_ZERO_TAPS_H_
