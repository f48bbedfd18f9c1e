#include "ir/tensor.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace lathe::ir {

const std::vector<IterVar>& TensorNode::reduce_axes() const {
  static const std::vector<IterVar> kNone;
  return is_reduction() ? body->reduce_axes : kNone;
}

Tensor Placeholder(std::string name, std::vector<int64_t> shape, Type dtype) {
  auto t = std::make_shared<TensorNode>();
  t->name = std::move(name);
  t->dtype = dtype;
  t->shape = std::move(shape);
  t->tag = "placeholder";
  return t;
}

Tensor Compute(std::string name, std::vector<int64_t> shape,
               const std::function<Expr(const std::vector<Expr>&)>& fn, std::string tag,
               std::vector<std::string> axis_names) {
  auto t = std::make_shared<TensorNode>();
  t->name = std::move(name);
  t->shape = std::move(shape);
  std::vector<Expr> vars;
  for (size_t d = 0; d < t->shape.size(); ++d) {
    std::string axis = d < axis_names.size() ? axis_names[d] : "i" + std::to_string(d);
    IterVar iv = MakeIterVar(axis, t->shape[d]);
    vars.push_back(iv->var);
    t->axes.push_back(std::move(iv));
  }
  t->body = fn(vars);
  t->dtype = t->body->type;
  t->tag = std::move(tag);
  return t;
}

Expr Read(const Tensor& t, std::vector<Expr> indices) {
  return TensorRead(t->name, t->dtype, std::move(indices));
}

Expr Sum(Expr source, std::vector<IterVar> axes, Expr condition) {
  return Reduce(ReduceOp::kSum, std::move(source), std::move(axes), std::move(condition));
}

Expr MaxReduce(Expr source, std::vector<IterVar> axes, Expr condition) {
  return Reduce(ReduceOp::kMax, std::move(source), std::move(axes), std::move(condition));
}

namespace {

// Appends the names of the tensors `x` reads to `out`, each once, in first-read order. A body
// reads a handful of tensors: a scan of `out` finds repeats faster than a set would.
void CollectReads(const Expr& x, std::vector<std::string>* out) {
  if (!x) return;
  if (x->kind == ExprKind::kTensorRead &&
      std::find(out->begin(), out->end(), x->name) == out->end()) {
    out->push_back(x->name);
  }
  for (const Expr& o : x->operands) CollectReads(o, out);
}

}  // namespace

std::vector<std::string> ReadTensors(const Expr& e) {
  std::vector<std::string> out;
  CollectReads(e, &out);
  return out;
}

}  // namespace lathe::ir
