// \file
// Helpers shared by the operator files of ir/ (ops.cc, ops_elementwise.cc, reference.cc,
// workload.cc): typed access to a canonical spec's values and the fused epilogue stage.
// Internal to ir/.
#ifndef LATHE_IR_OPS_INTERNAL_H_
#define LATHE_IR_OPS_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/epilogue.h"
#include "ir/ops.h"
#include "ir/tensor.h"
#include "ir/workload.h"

namespace lathe::ir::internal {

#define LATHE_IR_ASSIGN_OR_RETURN(lhs, expr)     \
  do {                                           \
    auto _v = (expr);                            \
    if (!_v.ok()) return std::move(_v).status(); \
    lhs = *std::move(_v);                        \
  } while (0)

absl::StatusOr<std::string> GetStr(const WorkloadSpec& spec, const std::string& key);
// The value of an optional key, or `fallback` when the spec does not hold it.
std::string GetStrOr(const WorkloadSpec& spec, const std::string& key, std::string fallback);
absl::StatusOr<int64_t> GetInt(const WorkloadSpec& spec, const std::string& key);
absl::Status ExpectOp(const WorkloadSpec& spec, std::initializer_list<const char*> ops);

// "AxBxC" -> {A, B, C} (signed integers); InvalidArgument naming `what` on anything else.
absl::StatusOr<std::vector<int64_t>> ParseDims(absl::string_view text, absl::string_view what);
// Strides/dilations "S" or "HxW" -> {h, w}; pads "P", "HxW" or "TxLxBxR" -> {t, l, b, r}.
absl::StatusOr<std::vector<int64_t>> ParsePair(absl::string_view text, absl::string_view what);
absl::StatusOr<std::vector<int64_t>> ParsePads(absl::string_view text, absl::string_view what);
// Reads stride, pad and dilation of a spec (dilation only when the op has it).
absl::Status GetWindow(const WorkloadSpec& spec, Window2d* win);
absl::StatusOr<EpilogueExpr> GetEpilogue(const WorkloadSpec& spec);
// The channel block of a layout: 0 for "nchw" and "nhwc", x for "nchw{x}c"; InvalidArgument
// naming the layout for anything else.
absl::StatusOr<int64_t> LayoutBlock(const std::string& layout);

std::string DimsText(const std::vector<int64_t>& dims);  // {1,3} -> "1x3"
double Product(const std::vector<int64_t>& shape);

// The placeholders of the epilogue's tensor steps, in step order: bias and scale of shape
// [channels], res of `out_shape`.
std::vector<Tensor> EpilogueInputs(const EpilogueExpr& e, int64_t channels,
                                   const std::vector<int64_t>& out_shape);
// The elementwise stage `name` applying `e` to `main`; `channel_dim` is the axis that bias
// and scale index. `inputs` as returned by EpilogueInputs.
Tensor EpilogueStage(const std::string& name, const Tensor& main, const EpilogueExpr& e,
                     const std::vector<Tensor>& inputs, int channel_dim,
                     std::vector<std::string> axis_names);
// The same, bias and scale indexed by `channel` of the output index (blocked layouts: the
// channel of block b, lane v is b * block + v).
Tensor EpilogueStage(const std::string& name, const Tensor& main, const EpilogueExpr& e,
                     const std::vector<Tensor>& inputs,
                     const std::function<Expr(const std::vector<Expr>&)>& channel,
                     std::vector<std::string> axis_names);

// The spatially padded copy of `x` (stage "pad", tag "pad": `fill` outside X), appended to
// *tensors, or `x` itself without padding. h and w are X's spatial extents; the spatial axes
// are 1, 2 (nhwc) or 2, 3.
Tensor PadStage(const Tensor& x, const Window2d& win, bool nhwc, double fill, int64_t h, int64_t w,
                std::vector<Tensor>* tensors);

// The epilogue's tensor arguments of a reference: they follow the `first` main inputs, in
// step order.
struct EpilogueTensors {
  const float* bias = nullptr;
  const float* scale = nullptr;
  const float* shift = nullptr;
  const float* res = nullptr;

  EpilogueTensors(const EpilogueExpr& e, std::span<float* const> args, size_t first);
  // The epilogue of `v` at output element `index` (flat) of channel `channel`, in double.
  double Apply(const EpilogueExpr& e, double v, int64_t channel, int64_t index) const;
};

// The reference of winograd_in and winograd_out (ir/ops_winograd.cc).
void WinogradReference(const WinogradParams& p, std::span<float* const> args);

// The reference of the elementwise and data-movement ops (reference_elementwise.cc); sets
// *handled to false for any other op.
absl::Status ComputeDataReference(const WorkloadSpec& spec, std::span<float* const> args,
                                  bool* handled);

}  // namespace lathe::ir::internal

#endif  // LATHE_IR_OPS_INTERNAL_H_
