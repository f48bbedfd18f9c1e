// \file
// Features of lowered programs for the learned cost model (DESIGN.md "Cost model"): one fixed-
// length float row per Store statement, in the spirit of Ansor's per-store features. Every
// value is a non-negative count, extent, size or flag, scaled with log2(1 + x); a flag is
// therefore 0 or 1.
//
// Row layout (kNumFeatures = 164 floats), by group; the offsets below name the first float of
// each group and FeatureNames() names every float:
//   kOffsetFloatOps  (7)  float add/sub, mul, div, cmp, math calls, min/max, select/other;
//                         each counted over the store's value, index and predicate and
//                         weighted by the product of the enclosing loop extents (x lanes)
//   kOffsetIntOps    (9)  the same for int64 index arithmetic (add/sub, mul, div/mod, cmp,
//                         min/max, select, other) and bool ops (and/or/not), guard conditions
//   kOffsetVectorize (7)  number of vectorized loops, product of their extents, extent of the
//                         innermost one, position one-hot (none, innermost, middle, outermost);
//                         a store of vectors (Lower()'s CPU recipe vectorizes loops into lanes)
//                         counts as an innermost vectorized loop of its widest vector's lanes
//   kOffsetUnroll    (7)  the same for unrolled loops
//   kOffsetParallel  (7)  the same for parallel loops
//   kOffsetGpu       (8)  any GPU binding, extents bound to blockIdx.x/y/z, threadIdx.x/y/z,
//                         vthread
//   kOffsetBuffers   (5 x 20) per buffer the store touches, up to 5, sorted by bytes touched
//                         (descending); absent buffers are zero. kBufferFeatureNames lists the
//                         20 fields: access type one-hot (read, write, read-write), bytes,
//                         unique bytes, cache lines (64 B), unique lines, reuse type one-hot
//                         (loop-carried read, serial multiple access, none), reuse distance in
//                         iterations and bytes, reuse count, bytes / unique bytes / lines /
//                         unique lines per reuse, stride of the innermost loop that moves the
//                         access, contiguous (that stride is 1), local scope
//   kOffsetAlloc     (6)  for a store into an allocated buffer: its size in bytes, bytes
//                         allocated over all executions, product of the loops enclosing the
//                         allocation, local scope, shared scope; and the number of enclosing
//                         allocations
//   kOffsetLoopNest  (3)  number of enclosing loops, product of their extents, auto-unroll
//                         (product of the innermost run of unrolled loops)
//   kOffsetIntensity (10) arithmetic intensity curve: float ops / unique bytes touched below
//                         each loop level, from the outermost level to the innermost,
//                         resampled to 10 points
//
// Counts (ops, bytes, lines, guards) weigh a store by how often it runs: the product of its
// loops' extents times the share of their iterations on which the enclosing branches take its
// arm (a versioned loop's guard-free and guarded copies split the iterations). Extents that
// are not constants use their constant upper bound given the enclosing loops (1 when
// unbounded). The features are deterministic: equal programs give equal bytes.
#ifndef LATHE_COST_MODEL_FEATURES_H_
#define LATHE_COST_MODEL_FEATURES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/stmt.h"

namespace lathe::cost_model {

inline constexpr int kNumFloatOpFeatures = 7;
inline constexpr int kNumIntOpFeatures = 9;
inline constexpr int kNumAnnotationFeatures = 7;
inline constexpr int kNumGpuFeatures = 8;
inline constexpr int kMaxBuffers = 5;
inline constexpr int kNumBufferFeatures = 20;
inline constexpr int kNumAllocFeatures = 6;
inline constexpr int kNumLoopNestFeatures = 3;
inline constexpr int kNumIntensitySamples = 10;

inline constexpr int kOffsetFloatOps = 0;
inline constexpr int kOffsetIntOps = kOffsetFloatOps + kNumFloatOpFeatures;
inline constexpr int kOffsetVectorize = kOffsetIntOps + kNumIntOpFeatures;
inline constexpr int kOffsetUnroll = kOffsetVectorize + kNumAnnotationFeatures;
inline constexpr int kOffsetParallel = kOffsetUnroll + kNumAnnotationFeatures;
inline constexpr int kOffsetGpu = kOffsetParallel + kNumAnnotationFeatures;
inline constexpr int kOffsetBuffers = kOffsetGpu + kNumGpuFeatures;
inline constexpr int kOffsetAlloc = kOffsetBuffers + kMaxBuffers * kNumBufferFeatures;
inline constexpr int kOffsetLoopNest = kOffsetAlloc + kNumAllocFeatures;
inline constexpr int kOffsetIntensity = kOffsetLoopNest + kNumLoopNestFeatures;
inline constexpr int kNumFeatures = kOffsetIntensity + kNumIntensitySamples;
static_assert(kNumFeatures == 164, "the documented layout has 164 floats");

// Version of the layout above; a saved model records it and is refused by a build whose
// layout differs. Bump it whenever a feature changes meaning, or the program that Lower()
// makes of a stored trace changes (stored features would describe another program): 2, the
// vectorized program of the whole recipe; 3, tile loops versioned for guards under vectors; 4,
// the GPU recipe's 4-lane accesses and doubled shared tiles.
inline constexpr int kFeatureVersion = 4;

// A program's features: `num_rows` rows (one per Store) of `num_cols` floats, row-major.
struct FeatureMatrix {
  std::vector<float> data;
  int num_rows = 0;
  int num_cols = kNumFeatures;

  const float* row(int r) const { return data.data() + static_cast<size_t>(r) * num_cols; }
};

// The name of every feature, kNumFeatures entries in layout order ("float_add",
// "buf0.bytes", "intensity.3", ...).
const std::vector<std::string>& FeatureNames();

// One row per Store of `func`, in program order. A function without stores gives zero rows.
// Fails with InvalidArgument for a function without a body.
absl::StatusOr<FeatureMatrix> ExtractFeatures(const ir::LoweredFunc& func);

}  // namespace lathe::cost_model

#endif  // LATHE_COST_MODEL_FEATURES_H_
