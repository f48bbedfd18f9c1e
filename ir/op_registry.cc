#include "ir/op_registry.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/ops_internal.h"

namespace lathe::ir {
namespace {

using internal::Product;

// The builder of a row: the op's typed parameters, then its compute definition; the FLOP
// count is the table's, so that the definition and the parser-only readers agree.
template <typename P, absl::StatusOr<P> (*Get)(const WorkloadSpec&), OpDefinition (*Op)(const P&)>
absl::StatusOr<OpDefinition> Build(const WorkloadSpec& spec) {
  absl::StatusOr<P> p = Get(spec);
  if (!p.ok()) return p.status();
  return Op(*p);
}

absl::StatusOr<double> MatmulFlops(const WorkloadSpec& spec) {
  absl::StatusOr<MatmulParams> p = GetMatmulParams(spec);
  if (!p.ok()) return p.status();
  const double outputs =
      static_cast<double>(std::max<int64_t>(p->batch, 1)) * Product({p->m, p->n});
  return 2.0 * outputs * static_cast<double>(p->k) + outputs * p->epilogue.FlopsPerElement();
}

absl::StatusOr<double> Conv2dFlops(const WorkloadSpec& spec) {
  absl::StatusOr<Conv2dParams> p = GetConv2dParams(spec);
  if (!p.ok()) return p.status();
  const double outputs = Product({p->n, p->k, p->oh(), p->ow()});
  const int64_t cpg = p->c / p->groups;
  return 2.0 * outputs * static_cast<double>(cpg * p->r * p->s) +
         outputs * p->epilogue.FlopsPerElement();
}

absl::StatusOr<double> ConvTransposeFlops(const WorkloadSpec& spec) {
  absl::StatusOr<ConvTransposeParams> p = GetConvTransposeParams(spec);
  if (!p.ok()) return p.status();
  const double outputs = Product({p->n, p->k, p->oh(), p->ow()});
  const int64_t kpg = p->k / p->groups;
  return 2.0 * static_cast<double>(p->n * p->c * p->h * p->w * kpg * p->r * p->s) +
         outputs * p->epilogue.FlopsPerElement();
}

absl::StatusOr<double> Pool2dFlops(const WorkloadSpec& spec) {
  absl::StatusOr<Pool2dParams> p = GetPool2dParams(spec);
  if (!p.ok()) return p.status();
  return Product({p->n, p->c, p->oh(), p->ow()}) * static_cast<double>(p->r * p->s) *
         (p->max ? 1 : 2);
}

absl::StatusOr<double> SoftmaxFlops(const WorkloadSpec& spec) {
  absl::StatusOr<SoftmaxParams> p = GetSoftmaxParams(spec);
  if (!p.ok()) return p.status();
  // max: 1; exp-sum: sub, exp, add; normalize: sub, exp, div.
  return 7.0 * Product({p->m, p->n, p->inner});
}

absl::StatusOr<double> LayerNormFlops(const WorkloadSpec& spec) {
  absl::StatusOr<LayerNormParams> p = GetLayerNormParams(spec);
  if (!p.ok()) return p.status();
  // mean: 2; var: 4; normalize: sub, add, sqrt, div, mul, add.
  return 12.0 * static_cast<double>(p->m) * static_cast<double>(p->n);
}

absl::StatusOr<double> EwiseFlops(const WorkloadSpec& spec) {
  absl::StatusOr<EwiseParams> p = GetEwiseParams(spec);
  if (!p.ok()) return p.status();
  return Product(p->out_shape()) * ((p->b.empty() ? 0.0 : 1.0) + p->epilogue.FlopsPerElement());
}

absl::StatusOr<double> NoFlops(const WorkloadSpec&) { return 0.0; }  // data movement

absl::StatusOr<double> ResizeFlops(const WorkloadSpec& spec) {
  absl::StatusOr<ResizeParams> p = GetResizeParams(spec);
  if (!p.ok()) return p.status();
  return p->linear ? 9.0 * Product({p->n, p->c, p->oh, p->ow}) : 0.0;
}

absl::StatusOr<double> ReduceFlops(const WorkloadSpec& spec) {
  absl::StatusOr<ReduceParams> p = GetReduceParams(spec);
  if (!p.ok()) return p.status();
  return Product(p->shape) * (p->kind == ReduceKind::kMean ? 2.0 : 1.0);
}

absl::StatusOr<double> WinogradInFlops(const WorkloadSpec& spec) {
  absl::StatusOr<WinogradParams> p = GetWinogradParams(spec);
  if (!p.ok()) return p.status();
  // Adds and constant multiplies of the transform: about two per input element and position
  // of V [t, t, tiles, c].
  const int64_t t = p->t();
  return 2.0 * Product({t, t, p->tiles(), p->c}) * static_cast<double>(t);
}

absl::StatusOr<double> WinogradOutFlops(const WorkloadSpec& spec) {
  absl::StatusOr<WinogradParams> p = GetWinogradParams(spec);
  if (!p.ok()) return p.status();
  const int64_t t = p->t();
  const double outputs = Product({p->n, p->c, p->oh(), p->ow()});
  return 2.0 * outputs * static_cast<double>(t * t) / static_cast<double>(p->m) +
         outputs * p->epilogue.FlopsPerElement();
}

absl::StatusOr<double> SepConv2dFlops(const WorkloadSpec& spec) {
  absl::StatusOr<SepConv2dParams> p = GetSepConv2dParams(spec);
  if (!p.ok()) return p.status();
  const double mid = Product({p->dw.n, p->dw.k, p->dw.oh(), p->dw.ow()});
  const double outputs = Product({p->pw.n, p->pw.k, p->pw.oh(), p->pw.ow()});
  return 2.0 * mid * static_cast<double>(p->dw.r * p->dw.s) +
         mid * p->dw.epilogue.FlopsPerElement() + 2.0 * outputs * static_cast<double>(p->pw.c) +
         outputs * p->pw.epilogue.FlopsPerElement();
}

const std::vector<std::string> kBools = {"0", "1"};

std::vector<OpInfo>* MakeTable() {
  using K = KeyKind;
  namespace in = internal;
  const KeyDef epilogue{"epilogue", K::kEpilogue, "none"};
  const KeyDef transpose_a{"transpose_a", K::kChoice, "0", kBools, true};
  const KeyDef transpose_b{"transpose_b", K::kChoice, "0", kBools, true};
  const KeyDef bpanel{"bpanel", K::kPositive, nullptr, {}, false, true};
  auto required = [](const char* name, K kind = K::kPositive) {
    return KeyDef{name, kind, nullptr};
  };
  return new std::vector<OpInfo>{
      {OpKind::kMatmul,
       "matmul",
       {required("m"), required("n"), required("k"), epilogue, transpose_a, transpose_b, bpanel},
       "matmul:m=64,n=32,k=16,epilogue=bias_relu",
       in::CheckMatmulShapes,
       MatmulFlops,
       Build<MatmulParams, GetMatmulParams, MatmulOp>,
       in::MatmulReference},
      {OpKind::kBatchMatmul,
       "batch_matmul",
       {required("b"), required("m"), required("n"), required("k"), epilogue, transpose_a,
        transpose_b, KeyDef{"bcast", K::kChoice, "none", {"none", "a", "b"}, true}, bpanel},
       "batch_matmul:b=2,m=8,n=32,k=16,bpanel=16",
       in::CheckMatmulShapes,
       MatmulFlops,
       Build<MatmulParams, GetMatmulParams, MatmulOp>,
       in::MatmulReference},
      {OpKind::kConv2d,
       "conv2d",
       {required("n"), required("c"), required("h"), required("w"), required("k"), required("r"),
        required("s"), KeyDef{"stride", K::kPair, "1"}, KeyDef{"pad", K::kPads, "0"},
        KeyDef{"dilation", K::kPair, "1"}, KeyDef{"groups", K::kPositive, "1"},
        KeyDef{"layout", K::kLayout, "nchw"}, epilogue,
        KeyDef{"kblock", K::kPositive, nullptr, {}, false, true, true}},
       "conv2d:n=1,c=8,h=9,w=9,k=16,r=3,s=3,pad=1,stride=2,epilogue=bias_relu",
       in::CheckConv2dShapes,
       Conv2dFlops,
       Build<Conv2dParams, GetConv2dParams, Conv2dOp>,
       in::Conv2dReference},
      {OpKind::kConv2dTranspose,
       "conv2d_transpose",
       {required("n"), required("c"), required("h"), required("w"), required("k"), required("r"),
        required("s"), KeyDef{"stride", K::kPair, "1"}, KeyDef{"pad", K::kPads, "0"},
        KeyDef{"dilation", K::kPair, "1"}, KeyDef{"output_padding", K::kPads, "0"},
        KeyDef{"groups", K::kPositive, "1"}, epilogue},
       "conv2d_transpose:n=1,c=4,h=4,w=4,k=2,r=2,s=2,stride=2",
       in::CheckConvTransposeShapes,
       ConvTransposeFlops,
       Build<ConvTransposeParams, GetConvTransposeParams, ConvTransposeOp>,
       in::ConvTransposeReference},
      {OpKind::kPool2d,
       "pool2d",
       {required("n"), required("c"), required("h"), required("w"), required("r"), required("s"),
        KeyDef{"stride", K::kPair, "1"}, KeyDef{"pad", K::kPads, "0"},
        KeyDef{"kind", K::kChoice, "max", {"max", "avg"}}, KeyDef{"layout", K::kLayout, "nchw"},
        KeyDef{"count_include_pad", K::kChoice, "1", kBools, true}},
       "pool2d:n=1,c=2,h=8,w=8,r=3,s=3,stride=2,pad=1,kind=avg",
       in::CheckPool2dShapes,
       Pool2dFlops,
       Build<Pool2dParams, GetPool2dParams, Pool2dOp>,
       in::Pool2dReference},
      {OpKind::kSoftmax,
       "softmax",
       {required("m"), required("n"), KeyDef{"inner", K::kPositive, "1", {}, true}},
       "softmax:m=4,n=8",
       in::CheckSoftmaxShapes,
       SoftmaxFlops,
       Build<SoftmaxParams, GetSoftmaxParams, SoftmaxOp>,
       in::SoftmaxReference},
      {OpKind::kLayerNorm,
       "layer_norm",
       {required("m"), required("n"), KeyDef{"eps", K::kPositiveFloat, "1e-05"}},
       "layer_norm:m=4,n=8,eps=0.001",
       in::CheckLayerNormShapes,
       LayerNormFlops,
       Build<LayerNormParams, GetLayerNormParams, LayerNormOp>,
       in::LayerNormReference},
      {OpKind::kEwise,
       "ewise",
       {required("a", K::kShape), KeyDef{"b", K::kShape, nullptr, {}, false, true},
        KeyDef{"binary",
               K::kChoice,
               nullptr,
               {"add", "sub", "mul", "div", "max", "min", "pow"},
               false,
               true},
        epilogue, KeyDef{"upsample", K::kShape, nullptr, {}, false, true}},
       "ewise:a=2x3,b=3,binary=add,epilogue=relu",
       in::CheckEwiseShapes,
       EwiseFlops,
       Build<EwiseParams, GetEwiseParams, EwiseOp>,
       in::EwiseReference},
      {OpKind::kTranspose,
       "transpose",
       {required("shape", K::kShape), required("perm", K::kIndices)},
       "transpose:shape=2x3x4,perm=0x2x1",
       in::CheckTransposeShapes,
       NoFlops,
       Build<TransposeParams, GetTransposeParams, TransposeOp>,
       in::TransposeReference},
      {OpKind::kSlice,
       "slice",
       {required("shape", K::kShape), required("begin", K::kIndices), required("size", K::kShape),
        KeyDef{"step", K::kShape, nullptr, {}, false, true}},
       "slice:shape=4x4,begin=1x0,size=2x4",
       in::CheckSliceShapes,
       NoFlops,
       Build<SliceParams, GetSliceParams, SliceOp>,
       in::SliceReference},
      {OpKind::kConcat,
       "concat",
       {required("axis", K::kNonNegative), required("inputs", K::kShapeList)},
       "concat:axis=1,inputs=1x2x4+1x3x4",
       in::CheckConcatShapes,
       NoFlops,
       Build<ConcatParams, GetConcatParams, ConcatOp>,
       in::ConcatReference},
      {OpKind::kResize,
       "resize",
       {required("n"), required("c"), required("h"), required("w"), required("oh"), required("ow"),
        KeyDef{"mode", K::kChoice, "nearest", {"nearest", "linear"}},
        KeyDef{"coord",
               K::kChoice,
               "half_pixel",
               {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"}},
        KeyDef{"nearest",
               K::kChoice,
               "round_prefer_floor",
               {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}},
        KeyDef{"layout", K::kLayout, "nchw", {}, true}},
       "resize:n=1,c=2,h=4,w=4,oh=8,ow=8,mode=linear",
       in::CheckResizeShapes,
       ResizeFlops,
       Build<ResizeParams, GetResizeParams, ResizeOp>,
       in::ResizeReference},
      {OpKind::kReduce,
       "reduce",
       {required("shape", K::kShape), required("axes", K::kIndices),
        KeyDef{"kind", K::kChoice, "mean", {"mean", "sum", "max", "min"}}},
       "reduce:shape=2x3x4,axes=2,kind=sum",
       in::CheckReduceShapes,
       ReduceFlops,
       Build<ReduceParams, GetReduceParams, ReduceTensorOp>,
       in::ReduceReference},
      {OpKind::kWinogradIn,
       "winograd_in",
       {required("n"), required("c"), required("h"), required("w"),
        KeyDef{"m", K::kChoice, "4", {"2", "4"}}, KeyDef{"pad", K::kPads, "1"},
        KeyDef{"layout", K::kLayout, nullptr}},
       "winograd_in:n=1,c=16,h=10,w=10,m=2,layout=nchw8c",
       in::CheckWinogradShapes,
       WinogradInFlops,
       Build<WinogradParams, GetWinogradParams, WinogradInOp>,
       in::WinogradSpecReference},
      {OpKind::kWinogradOut,
       "winograd_out",
       {required("n"), required("k"), required("oh"), required("ow"),
        KeyDef{"m", K::kChoice, "4", {"2", "4"}}, KeyDef{"layout", K::kLayout, nullptr}, epilogue},
       "winograd_out:n=1,k=16,oh=8,ow=8,layout=nchw8c,epilogue=bias_relu",
       in::CheckWinogradShapes,
       WinogradOutFlops,
       Build<WinogradParams, GetWinogradParams, WinogradOutOp>,
       in::WinogradSpecReference},
      {OpKind::kSepConv2d,
       "sepconv2d",
       {required("n"), required("c"), required("h"), required("w"), required("k"), required("r"),
        required("s"), KeyDef{"stride", K::kPair, "1"}, KeyDef{"pad", K::kPads, "0"},
        KeyDef{"dilation", K::kPair, "1"}, KeyDef{"layout", K::kLayout, nullptr},
        KeyDef{"dw_epilogue", K::kEpilogue, "none"}, epilogue,
        KeyDef{"kblock", K::kPositive, nullptr, {}, false, true, true}},
       "sepconv2d:n=1,c=16,h=9,w=9,k=24,r=3,s=3,pad=1,layout=nchw8c,dw_epilogue=bias_relu,"
       "epilogue=bias",
       in::CheckSepConv2dShapes,
       SepConv2dFlops,
       Build<SepConv2dParams, GetSepConv2dParams, SepConv2dOp>,
       in::SepConv2dReference},
  };
}

}  // namespace

const char* KeyKindName(KeyKind kind) {
  switch (kind) {
    case KeyKind::kPositive:
      return "pos";
    case KeyKind::kNonNegative:
      return "nonneg";
    case KeyKind::kChoice:
      return "choice";
    case KeyKind::kPositiveFloat:
      return "float";
    case KeyKind::kPair:
      return "pair";
    case KeyKind::kPads:
      return "pads";
    case KeyKind::kShape:
      return "shape";
    case KeyKind::kIndices:
      return "indices";
    case KeyKind::kShapeList:
      return "shapes";
    case KeyKind::kEpilogue:
      return "epilogue";
    case KeyKind::kLayout:
      return "layout";
  }
  return "?";
}

const KeyDef* OpInfo::FindKey(std::string_view key) const {
  for (const KeyDef& k : keys) {
    if (key == k.name) return &k;
  }
  return nullptr;
}

const std::vector<OpInfo>& OpTable() {
  static const std::vector<OpInfo>* table = MakeTable();
  return *table;
}

const OpInfo* FindOp(std::string_view name) {
  for (const OpInfo& op : OpTable()) {
    if (name == op.name) return &op;
  }
  return nullptr;
}

const OpInfo& GetOp(OpKind kind) {
  const OpInfo& op = OpTable()[static_cast<size_t>(kind)];
  if (op.kind != kind) internal::Fatal("the op table is not in OpKind order");
  return op;
}

bool OpTakesKey(std::string_view name, std::string_view key) {
  const OpInfo* op = FindOp(name);
  return op != nullptr && op->FindKey(key) != nullptr;
}

absl::StatusOr<double> WorkloadFlops(const WorkloadSpec& spec) {
  const OpInfo* op = FindOp(spec.op);
  if (op == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown op '", spec.op, "'"));
  return op->flops(spec);
}

}  // namespace lathe::ir
