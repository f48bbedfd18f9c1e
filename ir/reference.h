// \file
// Naive reference implementations of every CONTRACT.md operator, written as plain C++ loops
// from the workload's spec parameters. They share nothing with the compute definitions of
// ir/ops.h or the compiler, so that checking a candidate against them tests both. Accumulation
// is in double precision; loop orders keep the large workloads (a 1024^3 matmul, a 256-channel
// 3x3 convolution) within a second or two on one core.
#ifndef LATHE_IR_REFERENCE_H_
#define LATHE_IR_REFERENCE_H_

#include <span>
#include <vector>

#include "absl/status/status.h"
#include "ir/workload.h"

namespace lathe::ir {

// Computes the output of `w` from its inputs. `args` holds one pointer per workload argument,
// in CONTRACT.md order (inputs, then the output), each to a dense row-major float32 buffer of
// the argument's shape; the inputs are read and the output (the last argument) is written.
// Fails with InvalidArgument when the argument count is wrong or a pointer is null; sizes
// cannot be checked through raw pointers (use the overload below when possible).
// Pool semantics match ir/ops.h: max over in-bounds elements; avg divides by r*s.
absl::Status ComputeReference(const Workload& w, std::span<float* const> args);

// Same, on owned buffers; also checks each buffer's size against its argument's shape.
absl::Status ComputeReference(const Workload& w, std::vector<std::vector<float>>& args);

}  // namespace lathe::ir

#endif  // LATHE_IR_REFERENCE_H_
