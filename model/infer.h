// \file
// Shape inference and constant folding on a model::Graph, in one walk over its nodes in
// topological order: every value gets its static shape and element type; nodes whose inputs
// are all constant (shape subgraphs: Shape, Gather, Cast, Slice, Concat, Unsqueeze, Reshape,
// arithmetic on constants, ...) are evaluated and removed, their outputs becoming constants.
// Also the attribute helpers that the kernel selection shares with inference.
#ifndef LATHE_MODEL_INFER_H_
#define LATHE_MODEL_INFER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/graph.h"

namespace lathe::model {

// Infers shapes and folds constants in place. An op lathe does not know, or an attribute or
// input form it does not support, is an InvalidArgument error naming the node and the op.
// Every node first passes ValidateNode (model/validate.h); every output shape is checked
// (positive extents, at most kMaxTensorElements elements) before the next node uses it; and
// the elements that folding creates over the whole graph are bounded (kFoldBudget), so a
// small file cannot make the importer allocate without limit.
absl::Status InferAndFold(Graph& g);

// Whether InferAndFold infers `op` for run-time data (the ops a compiled model computes);
// ops that only fold on constants are model/fold.h's IsFoldableOp.
bool IsInferredOp(const std::string& op);

// The 2-d window of a Conv, ConvTranspose or pooling node: strides, pads (top, left, bottom,
// right; auto_pad resolved against the input extent) and dilations.
struct Window {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  int64_t dil_h = 1, dil_w = 1;
};
// `kernel` is {r, s}; `in` is {h, w}. Pooling with ceil_mode adds the extra bottom/right
// padding that the ceiling needs.
absl::StatusOr<Window> WindowOf(const Node& n, const std::vector<int64_t>& in,
                                const std::vector<int64_t>& kernel);

// Normalizes a possibly negative axis against `rank`; InvalidArgument when out of range.
absl::StatusOr<int64_t> NormAxis(const Node& n, int64_t axis, int64_t rank);

// OK when `perm` is a permutation of 0..rank-1; InvalidArgument naming the node otherwise.
absl::Status CheckPerm(const Node& n, const std::vector<int64_t>& perm, size_t rank);

// Numpy-style broadcast of two shapes; InvalidArgument naming the node when they do not.
absl::StatusOr<std::vector<int64_t>> Broadcast(const Node& n, const std::vector<int64_t>& a,
                                               const std::vector<int64_t>& b);

// The int64 constant input `i` of `n` (shape operands such as Reshape's shape, Slice's
// starts); nullopt when the input is absent; InvalidArgument when it is not constant.
absl::StatusOr<std::optional<std::vector<int64_t>>> IntsInput(const Graph& g, const Node& n,
                                                              size_t i);

}  // namespace lathe::model

#endif  // LATHE_MODEL_INFER_H_
