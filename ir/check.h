// \file
// Correctness checking of candidate programs: argument buffers for a workload, seeded random
// inputs, and the comparison of a candidate's output with the reference (ir/reference.h) by
// the rule of DESIGN.md: max |cand - ref| / max(max |ref|, tiny) <= 1e-3 for float32, and any
// NaN or Inf in the candidate fails. Workers compute the reference once per workload and
// reuse it for every candidate.
#ifndef LATHE_IR_CHECK_H_
#define LATHE_IR_CHECK_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ir/workload.h"

namespace lathe::ir {

// The float32 tolerance of DESIGN.md.
inline constexpr double kDefaultTolerance = 1e-3;

// One zero-filled float32 buffer per argument of `w` (CONTRACT.md order), sized by the
// argument's shape.
std::vector<std::vector<float>> AllocateArgs(const Workload& w);

// Fills every input argument (all but the last) with values uniform in [-1, 1) drawn from a
// generator seeded with `seed`; the output is left alone. The sequence depends only on the
// seed and the buffer sizes (the generator is splitmix64, not a standard-library
// distribution), so every worker on every platform sees the same inputs.
void FillRandomInputs(std::vector<std::vector<float>>& args, uint64_t seed);

// The numbers of one comparison.
struct CompareResult {
  bool ok = false;
  int64_t size = 0;              // elements compared
  double max_abs_ref = 0;        // max |reference| (finite elements)
  double max_abs_error = 0;      // max |candidate - reference| over finite candidate elements
  double rel_error = 0;          // max_abs_error / max(max_abs_ref, tiny)
  int64_t worst_index = -1;      // flat index of max_abs_error (-1 when size is 0)
  int64_t first_bad_index = -1;  // first element that is non-finite or over the tolerance
  int64_t num_bad = 0;           // elements over the tolerance or non-finite
  int64_t num_nonfinite = 0;     // NaN or Inf elements in the candidate
};

// Compares element by element. An element is bad when the candidate is NaN or Inf, or when
// |cand - ref| / max(max |ref|, tiny) > tolerance. A size mismatch or a non-finite reference
// makes the result not ok (with first_bad_index at the first such element or -1).
CompareResult CompareOutputs(std::span<const float> candidate, std::span<const float> reference,
                             double tolerance = kDefaultTolerance);

// CompareOutputs as a Status: OK, or InvalidArgument for mismatched sizes, or Internal (the
// candidate computed a wrong answer) with a message naming the max error, the tolerance and
// the first bad index, written as a multi-dimensional index when `shape` is given, e.g.
// `wrong answer: relative error 0.25 > 0.001 (max abs error 0.5, max |ref| 2); first bad
// element [1,3]: got nan, expected 0.75; 4 of 16 elements bad`. `result`, when not null,
// receives the numbers.
absl::Status CheckOutput(std::span<const float> candidate, std::span<const float> reference,
                         const std::vector<int64_t>& shape = {},
                         double tolerance = kDefaultTolerance, CompareResult* result = nullptr);

// Formats a flat index as "[i,j,...]" for a row-major shape, or "[flat]" when shape is empty
// or does not match.
std::string FormatIndex(int64_t flat, const std::vector<int64_t>& shape);

}  // namespace lathe::ir

#endif  // LATHE_IR_CHECK_H_
