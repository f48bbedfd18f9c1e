// \file
// Helpers shared by the operator files of ir/ (ops.cc, ops_elementwise.cc, reference.cc,
// workload.cc, op_registry.cc, op_shapes.cc): typed access to a canonical spec's values, the
// fused epilogue stage, and the functions the op table points to.
// Internal to ir/.
#ifndef LATHE_IR_OPS_INTERNAL_H_
#define LATHE_IR_OPS_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/epilogue.h"
#include "ir/op_registry.h"
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
// OK when the spec's op is one of `ops`; InvalidArgument naming the first otherwise.
absl::Status ExpectOp(const WorkloadSpec& spec, std::initializer_list<OpKind> ops);
// Reports a bug (an internal error, not bad input) on stderr and aborts.
[[noreturn]] void Fatal(const std::string& message);

// "AxBxC" -> {A, B, C} (signed integers); InvalidArgument naming `what` on anything else.
absl::StatusOr<std::vector<int64_t>> ParseDims(absl::string_view text, absl::string_view what);
// Strides/dilations "S" or "HxW" -> {h, w}; pads "P", "HxW" or "TxLxBxR" -> {t, l, b, r}.
absl::StatusOr<std::vector<int64_t>> ParsePair(absl::string_view text, absl::string_view what);
absl::StatusOr<std::vector<int64_t>> ParsePads(absl::string_view text, absl::string_view what);
// Reads stride, pad and dilation of a spec (dilation only when the op has it).
absl::Status GetWindow(const WorkloadSpec& spec, Window2d* win);
absl::StatusOr<EpilogueExpr> GetEpilogue(const WorkloadSpec& spec);

std::string DimsText(const std::vector<int64_t>& dims);  // {1,3} -> "1x3"
double Product(const std::vector<int64_t>& shape);

// The placeholders of the epilogue's tensor steps, in step order: bias and scale of shape
// [channels], res of `out_shape`.
// Their names are the steps' (bias, scale, shift, res) after `prefix`.
std::vector<Tensor> EpilogueInputs(const EpilogueExpr& e, int64_t channels,
                                   const std::vector<int64_t>& out_shape,
                                   const std::string& prefix = "");
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
                     std::vector<std::string> axis_names, const std::string& prefix = "");

// The spatially padded copy of `x` (stage "pad", tag "pad": `fill` outside X), appended to
// *tensors, or `x` itself without padding. h and w are X's spatial extents; the spatial axes
// are 1, 2 (nhwc) or 2, 3.
Tensor PadStage(const Tensor& x, const Window2d& win, bool nhwc, double fill, int64_t h, int64_t w,
                std::vector<Tensor>* tensors);

// The conv2d specs of a sepconv2d spec's depthwise and 1x1 parts (canonical where the spec
// is; the 1x1's extents are the depthwise output's).
absl::StatusOr<std::pair<WorkloadSpec, WorkloadSpec>> SepConvParts(const WorkloadSpec& spec);
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

// The columns of the op table (ir/op_registry.h) that live in the operators' files.
// Shape rules (op_shapes.cc), on canonical values:
absl::Status CheckMatmulShapes(const WorkloadSpec& spec);  // both matmuls
absl::Status CheckConv2dShapes(const WorkloadSpec& spec);
absl::Status CheckConvTransposeShapes(const WorkloadSpec& spec);
absl::Status CheckPool2dShapes(const WorkloadSpec& spec);
absl::Status CheckSoftmaxShapes(const WorkloadSpec& spec);
absl::Status CheckLayerNormShapes(const WorkloadSpec& spec);
absl::Status CheckEwiseShapes(const WorkloadSpec& spec);
absl::Status CheckTransposeShapes(const WorkloadSpec& spec);
absl::Status CheckSliceShapes(const WorkloadSpec& spec);
absl::Status CheckConcatShapes(const WorkloadSpec& spec);
absl::Status CheckResizeShapes(const WorkloadSpec& spec);
absl::Status CheckReduceShapes(const WorkloadSpec& spec);
absl::Status CheckWinogradShapes(const WorkloadSpec& spec);  // both sides
absl::Status CheckSepConv2dShapes(const WorkloadSpec& spec);
// References (reference.cc, reference_elementwise.cc): args as ComputeReference's.
using ReferenceArgs = std::span<float* const>;
absl::Status MatmulReference(const WorkloadSpec& spec, ReferenceArgs args);  // both matmuls
absl::Status Conv2dReference(const WorkloadSpec& spec, ReferenceArgs args);
absl::Status ConvTransposeReference(const WorkloadSpec& spec, ReferenceArgs args);
absl::Status Pool2dReference(const WorkloadSpec& spec, ReferenceArgs args);
absl::Status SoftmaxReference(const WorkloadSpec& spec, ReferenceArgs args);
absl::Status LayerNormReference(const WorkloadSpec& spec, ReferenceArgs args);
absl::Status WinogradSpecReference(const WorkloadSpec& spec, ReferenceArgs args);
absl::Status SepConv2dReference(const WorkloadSpec& spec, ReferenceArgs args);
absl::Status EwiseReference(const WorkloadSpec& spec, ReferenceArgs args);
absl::Status TransposeReference(const WorkloadSpec& spec, ReferenceArgs args);
absl::Status SliceReference(const WorkloadSpec& spec, ReferenceArgs args);
absl::Status ConcatReference(const WorkloadSpec& spec, ReferenceArgs args);
absl::Status ResizeReference(const WorkloadSpec& spec, ReferenceArgs args);
absl::Status ReduceReference(const WorkloadSpec& spec, ReferenceArgs args);

// Runs the reference `fn` on the typed parameters `p` of a spec.
template <typename P>
absl::Status RunReference(const absl::StatusOr<P>& p, void (*fn)(const P&, ReferenceArgs),
                          ReferenceArgs args) {
  if (!p.ok()) return p.status();
  fn(*p, args);
  return absl::OkStatus();
}

}  // namespace lathe::ir::internal

#endif  // LATHE_IR_OPS_INTERNAL_H_
