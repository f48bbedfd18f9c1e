// \file
// Compute definitions: placeholders and `compute` tensors with index expressions and reduce
// axes. Operators (ir/ops.h) are written in this language; schedules (ir/schedule.h) transform
// how they are computed, never what.
#ifndef LATHE_IR_TENSOR_H_
#define LATHE_IR_TENSOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/expr.h"

namespace lathe::ir {

// A tensor: an input placeholder (body == nullptr) or a computed tensor whose element at
// `axes` is `body`. A reduction's body is a Reduce node over its own reduce axes. Tensors are
// referred to by name in TensorRead nodes; names are unique within a workload.
struct TensorNode {
  std::string name;
  Type dtype;
  std::vector<int64_t> shape;
  std::vector<IterVar> axes;  // one per dimension, spatial
  Expr body;                  // null for placeholders
  // A short tag for feature extraction and sketch rules: "placeholder", "elementwise",
  // "reduction", "pad", "injective".
  std::string tag;

  bool is_placeholder() const { return body == nullptr; }
  bool is_reduction() const { return body && body->kind == ExprKind::kReduce; }
  const std::vector<IterVar>& reduce_axes() const;
};
using Tensor = std::shared_ptr<const TensorNode>;

Tensor Placeholder(std::string name, std::vector<int64_t> shape, Type dtype = Type::F32());

// Builds a computed tensor; `fn` receives one index variable per dimension. Axis variable
// names are `axis_names[i]` when given, else i0, i1, ...
Tensor Compute(std::string name, std::vector<int64_t> shape,
               const std::function<Expr(const std::vector<Expr>&)>& fn,
               std::string tag = "injective", std::vector<std::string> axis_names = {});

// Reads element `indices` of tensor `t`.
Expr Read(const Tensor& t, std::vector<Expr> indices);

// Reduction helpers for compute bodies.
Expr Sum(Expr source, std::vector<IterVar> axes, Expr condition = nullptr);
Expr MaxReduce(Expr source, std::vector<IterVar> axes, Expr condition = nullptr);

// The names of tensors read by `e` (deduplicated, in order of first use).
std::vector<std::string> ReadTensors(const Expr& e);

}  // namespace lathe::ir

#endif  // LATHE_IR_TENSOR_H_
