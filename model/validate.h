// \file
// The checks a model's nodes pass before any shape inference runs on them (libonnx's or
// lathe's own): the operator is one lathe knows, and every attribute that inference divides
// by, indexes with or multiplies with is in range (strides and dilations >= 1, pads >= 0,
// window attributes of the right length, a Transpose perm that is a permutation, ...).
// Untrusted model files reach inference only through these checks; what depends on the input
// ranks is checked again where inference knows them (model/infer.cc). Internal to model/.
#ifndef LATHE_MODEL_VALIDATE_H_
#define LATHE_MODEL_VALIDATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "model/graph.h"

namespace lathe::model {

// The largest stride, dilation, pad, kernel extent or group count a node may carry (2^24):
// far above any real model, and small enough that window arithmetic on extents of up to
// kMaxTensorElements cannot overflow int64.
inline constexpr int64_t kMaxWindowAttr = int64_t{1} << 24;

// InvalidArgument naming the node, the attribute and the rule, e.g.
// "node 'conv1' (Conv): stride 0 in attribute 'strides' (must be >= 1)"; an operator lathe
// does not know is "operator X is not supported".
absl::Status ValidateNode(const Node& n);

// ValidateNode on every node of `g`, in order; the first error.
absl::Status ValidateNodes(const Graph& g);

}  // namespace lathe::model

#endif  // LATHE_MODEL_VALIDATE_H_
