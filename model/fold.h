// \file
// Constant folding of single nodes and the shape operands that inference and kernel
// selection share (Reshape's target shape, Slice's windows, Resize's output size). Internal
// to model/.
#ifndef LATHE_MODEL_FOLD_H_
#define LATHE_MODEL_FOLD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/graph.h"

namespace lathe::model {

// Evaluates `n` when it is a Constant, a Shape (of any statically shaped value), or a
// foldable op whose inputs are all constant: its outputs become constant values of `g`.
// Returns whether it did (then the node is to be dropped).
absl::StatusOr<bool> TryFold(Graph& g, const Node& n);

// Whether TryFold may fold `op` (Constant, Shape and the ops it evaluates on constants).
bool IsFoldableOp(const std::string& op);

// The most elements one folded output may have (2^26); an op whose output would be larger is
// left unfolded where a kernel can compute it, and refused where only folding could.
inline constexpr int64_t kMaxFoldElements = int64_t{1} << 26;
// Ops that create data rather than rearrange it (Range, ConstantOfShape, Expand) are held to
// 2^24 elements: a few bytes of model must not become hundreds of megabytes.
inline constexpr int64_t kMaxGeneratedElements = int64_t{1} << 24;
// All the elements that folding creates in one graph: 2^27 beyond twice the elements of the
// model's own constants.
inline constexpr int64_t kFoldBudget = int64_t{1} << 27;

// The output shape of a Reshape, Flatten, Squeeze or Unsqueeze of a tensor of shape `in`.
absl::StatusOr<std::vector<int64_t>> ReshapeShape(const Graph& g, const Node& n,
                                                  const std::vector<int64_t>& in);

// The windows of a Slice (one) or a Split (one per output), per dimension: the first index,
// the output extent and the (positive) step.
struct SliceSpec {
  std::vector<int64_t> begin, size, step;
};
absl::StatusOr<std::vector<SliceSpec>> SliceSpecs(const Graph& g, const Node& n,
                                                  const std::vector<int64_t>& in);

// A Resize or Upsample of an NCHW tensor: its output extents and modes (ONNX attribute
// values); only the two spatial dimensions may change.
struct ResizeSpec {
  int64_t oh = 1, ow = 1;
  std::string mode = "nearest";
  std::string coord = "half_pixel";
  std::string nearest = "round_prefer_floor";
};
absl::StatusOr<ResizeSpec> ResizeSpecOf(const Graph& g, const Node& n,
                                        const std::vector<int64_t>& in);

}  // namespace lathe::model

#endif  // LATHE_MODEL_FOLD_H_
