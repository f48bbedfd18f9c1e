// The elementwise and data-movement operators of ir/ops.h (ewise, transpose, slice, concat,
// resize, reduce): their typed parameters and compute definitions. Every one is a single
// output stage over the output's shape (reduce: a reduction), so the CPU search space tiles,
// parallelises and vectorises it like any other output.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ir/ops.h"
#include "ir/ops_internal.h"

namespace lathe::ir {

using internal::DimsText;
using internal::ExpectOp;
using internal::GetInt;
using internal::GetStr;
using internal::ParseDims;
using internal::Product;

#define LATHE_ASSIGN_OR_RETURN LATHE_IR_ASSIGN_OR_RETURN

namespace {

Expr I(int64_t v) { return IntImm(v); }
Expr F(double v) { return FloatImm(v); }

absl::StatusOr<std::vector<int64_t>> DimsKey(const WorkloadSpec& spec, const std::string& key) {
  absl::StatusOr<std::string> s = GetStr(spec, key);
  if (!s.ok()) return s.status();
  return ParseDims(*s, key);
}

// The index of a broadcast operand of shape `shape` at output index `idx` (numpy rules:
// aligned at the right, extent-1 dimensions read at 0), upsampled by `up` (per dimension of
// `shape`; empty: 1s) where given.
std::vector<Expr> BroadcastIndex(const std::vector<int64_t>& shape, const std::vector<int64_t>& out,
                                 const std::vector<Expr>& idx,
                                 const std::vector<int64_t>& up = {}) {
  std::vector<Expr> r;
  const size_t off = out.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t f = up.empty() ? 1 : up[d];
    if (shape[d] == 1 && out[off + d] != 1) {
      r.push_back(I(0));
    } else {
      r.push_back(f > 1 ? Div(idx[off + d], I(f)) : idx[off + d]);
    }
  }
  return r;
}

// floor(v) of a float expression known to be above -16, as an integer.
Expr FloorIndex(const Expr& v) { return Sub(Cast(Type::I64(), Add(v, F(16.0))), I(16)); }

// The source coordinate (float) of output coordinate `o` of a resize from `in` to `out`.
Expr ResizeSource(const Expr& o, int64_t in, int64_t out, ResizeCoord coord) {
  const double scale = static_cast<double>(out) / static_cast<double>(in);
  Expr of = Cast(Type::F32(), o);
  switch (coord) {
    case ResizeCoord::kAsymmetric:
      return Div(of, F(scale));
    case ResizeCoord::kAlignCorners:
      return out == 1 ? F(0.0)
                      : Mul(of, F(static_cast<double>(in - 1) / static_cast<double>(out - 1)));
    case ResizeCoord::kPytorchHalfPixel:
      if (out == 1) return F(0.0);
      [[fallthrough]];
    case ResizeCoord::kHalfPixel:
      return Sub(Div(Add(of, F(0.5)), F(scale)), F(0.5));
  }
  return of;
}

Expr Clamp(const Expr& v, int64_t hi) { return Max(Min(v, I(hi)), I(0)); }

}  // namespace

std::vector<int64_t> EwiseParams::b_upsampled() const {
  std::vector<int64_t> r = b;
  for (size_t i = 0; i < r.size() && i < upsample.size(); ++i) r[i] *= upsample[i];
  return r;
}

std::vector<int64_t> EwiseParams::out_shape() const {
  if (b.empty()) return a;
  const std::vector<int64_t> b = b_upsampled();
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    out[i] = std::max(da, db);
  }
  return out;
}

std::vector<int64_t> ConcatParams::out_shape() const {
  std::vector<int64_t> out = inputs.front();
  out[axis] = 0;
  for (const auto& in : inputs) out[axis] += in[axis];
  return out;
}

std::vector<int64_t> ReduceParams::out_shape() const {
  std::vector<int64_t> out = shape;
  for (int64_t a : axes) out[a] = 1;
  return out;
}

// --- parameters ------------------------------------------------------------------------------

absl::StatusOr<EwiseParams> GetEwiseParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kEwise}); !s.ok()) return s;
  EwiseParams p;
  LATHE_ASSIGN_OR_RETURN(p.a, DimsKey(spec, "a"));
  if (spec.params.count("b") != 0) {
    LATHE_ASSIGN_OR_RETURN(p.b, DimsKey(spec, "b"));
    std::string op;
    LATHE_ASSIGN_OR_RETURN(op, GetStr(spec, "binary"));
    for (BinaryOp b : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv,
                       BinaryOp::kMax, BinaryOp::kMin, BinaryOp::kPow}) {
      if (op == BinaryOpName(b)) p.binary = b;
    }
    if (p.binary == BinaryOp::kNone) {
      return absl::InvalidArgumentError(absl::StrCat("unknown binary op '", op, "'"));
    }
  }
  if (spec.params.count("upsample") != 0) {
    LATHE_ASSIGN_OR_RETURN(p.upsample, DimsKey(spec, "upsample"));
  }
  LATHE_ASSIGN_OR_RETURN(p.epilogue, internal::GetEpilogue(spec));
  return p;
}

absl::StatusOr<TransposeParams> GetTransposeParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kTranspose}); !s.ok()) return s;
  TransposeParams p;
  LATHE_ASSIGN_OR_RETURN(p.shape, DimsKey(spec, "shape"));
  LATHE_ASSIGN_OR_RETURN(p.perm, DimsKey(spec, "perm"));
  return p;
}

absl::StatusOr<SliceParams> GetSliceParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kSlice}); !s.ok()) return s;
  SliceParams p;
  LATHE_ASSIGN_OR_RETURN(p.shape, DimsKey(spec, "shape"));
  LATHE_ASSIGN_OR_RETURN(p.begin, DimsKey(spec, "begin"));
  LATHE_ASSIGN_OR_RETURN(p.size, DimsKey(spec, "size"));
  if (spec.params.count("step") != 0) {
    LATHE_ASSIGN_OR_RETURN(p.step, DimsKey(spec, "step"));
  } else {
    p.step.assign(p.shape.size(), 1);
  }
  return p;
}

absl::StatusOr<ConcatParams> GetConcatParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kConcat}); !s.ok()) return s;
  ConcatParams p;
  LATHE_ASSIGN_OR_RETURN(p.axis, GetInt(spec, "axis"));
  std::string inputs;
  LATHE_ASSIGN_OR_RETURN(inputs, GetStr(spec, "inputs"));
  for (absl::string_view part : absl::StrSplit(inputs, '+')) {
    std::vector<int64_t> d;
    LATHE_ASSIGN_OR_RETURN(d, ParseDims(part, "inputs"));
    p.inputs.push_back(std::move(d));
  }
  return p;
}

absl::StatusOr<ResizeParams> GetResizeParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kResize}); !s.ok()) return s;
  ResizeParams p;
  LATHE_ASSIGN_OR_RETURN(p.n, GetInt(spec, "n"));
  LATHE_ASSIGN_OR_RETURN(p.c, GetInt(spec, "c"));
  LATHE_ASSIGN_OR_RETURN(p.h, GetInt(spec, "h"));
  LATHE_ASSIGN_OR_RETURN(p.w, GetInt(spec, "w"));
  LATHE_ASSIGN_OR_RETURN(p.oh, GetInt(spec, "oh"));
  LATHE_ASSIGN_OR_RETURN(p.ow, GetInt(spec, "ow"));
  std::string mode, coord, nearest, layout = "nchw";
  if (spec.params.count("layout") != 0) {
    LATHE_ASSIGN_OR_RETURN(layout, GetStr(spec, "layout"));
  }
  LATHE_ASSIGN_OR_RETURN(p.block, LayoutBlock(layout));
  LATHE_ASSIGN_OR_RETURN(mode, GetStr(spec, "mode"));
  LATHE_ASSIGN_OR_RETURN(coord, GetStr(spec, "coord"));
  LATHE_ASSIGN_OR_RETURN(nearest, GetStr(spec, "nearest"));
  p.linear = mode == "linear";
  p.coord = coord == "asymmetric"           ? ResizeCoord::kAsymmetric
            : coord == "align_corners"      ? ResizeCoord::kAlignCorners
            : coord == "pytorch_half_pixel" ? ResizeCoord::kPytorchHalfPixel
                                            : ResizeCoord::kHalfPixel;
  p.nearest = nearest == "floor"               ? NearestMode::kFloor
              : nearest == "ceil"              ? NearestMode::kCeil
              : nearest == "round_prefer_ceil" ? NearestMode::kRoundPreferCeil
                                               : NearestMode::kRoundPreferFloor;
  return p;
}

absl::StatusOr<ReduceParams> GetReduceParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kReduce}); !s.ok()) return s;
  ReduceParams p;
  LATHE_ASSIGN_OR_RETURN(p.shape, DimsKey(spec, "shape"));
  LATHE_ASSIGN_OR_RETURN(p.axes, DimsKey(spec, "axes"));
  std::string kind;
  LATHE_ASSIGN_OR_RETURN(kind, GetStr(spec, "kind"));
  p.kind = kind == "sum"   ? ReduceKind::kSum
           : kind == "max" ? ReduceKind::kMax
           : kind == "min" ? ReduceKind::kMin
                           : ReduceKind::kMean;
  return p;
}

// --- operators -------------------------------------------------------------------------------

OpDefinition EwiseOp(const EwiseParams& p) {
  OpDefinition def;
  const std::vector<int64_t> out = p.out_shape();
  Tensor a = Placeholder("A", p.a);
  def.args = {a};
  Tensor b;
  if (!p.b.empty()) {
    b = Placeholder("B", p.b);
    def.args.push_back(b);
  }
  const int channel_dim = out.size() >= 2 ? 1 : 0;
  std::vector<Tensor> extra = internal::EpilogueInputs(p.epilogue, out[channel_dim], out);
  for (const Tensor& t : extra) def.args.push_back(t);
  def.tensors = def.args;
  Tensor y = Compute(
      "Y", out,
      [&](const std::vector<Expr>& idx) {
        Expr v = Read(a, BroadcastIndex(p.a, out, idx));
        if (b) {
          Expr bv = Read(b, BroadcastIndex(p.b, out, idx, p.upsample));
          switch (p.binary) {
            case BinaryOp::kAdd:
              v = Add(v, bv);
              break;
            case BinaryOp::kSub:
              v = Sub(v, bv);
              break;
            case BinaryOp::kMul:
              v = Mul(v, bv);
              break;
            case BinaryOp::kDiv:
              v = Div(v, bv);
              break;
            case BinaryOp::kMax:
              v = Max(v, bv);
              break;
            case BinaryOp::kMin:
              v = Min(v, bv);
              break;
            case BinaryOp::kPow:
              v = Call("exp", {Mul(bv, Call("log", {v}))});
              break;
            case BinaryOp::kNone:
              break;
          }
        }
        return ApplyEpilogue(p.epilogue, v, [&](StepKind k) {
          for (const Tensor& t : extra) {
            if (t->name != StepName(k)) continue;
            if (k == StepKind::kRes) return Read(t, idx);
            if (k == StepKind::kResUp) {
              return Read(t,
                          BroadcastIndex(t->shape, out, idx, ResUpFactors(p.epilogue, out.size())));
            }
            return Read(t, {idx[channel_dim]});
          }
          return F(0.0);
        });
      },
      "elementwise");
  def.tensors.push_back(y);
  def.args.push_back(y);
  return def;
}

OpDefinition TransposeOp(const TransposeParams& p) {
  OpDefinition def;
  Tensor x = Placeholder("X", p.shape);
  std::vector<int64_t> out;
  for (int64_t d : p.perm) out.push_back(p.shape[d]);
  Tensor y = Compute(
      "Y", out,
      [&](const std::vector<Expr>& idx) {
        std::vector<Expr> src(p.shape.size());
        for (size_t i = 0; i < p.perm.size(); ++i) src[p.perm[i]] = idx[i];
        return Read(x, src);
      },
      "injective");
  def.args = {x, y};
  def.tensors = {x, y};
  return def;
}

OpDefinition SliceOp(const SliceParams& p) {
  OpDefinition def;
  Tensor x = Placeholder("X", p.shape);
  Tensor y = Compute(
      "Y", p.size,
      [&](const std::vector<Expr>& idx) {
        std::vector<Expr> src;
        for (size_t d = 0; d < idx.size(); ++d) {
          Expr e = p.step[d] == 1 ? idx[d] : Mul(idx[d], I(p.step[d]));
          src.push_back(p.begin[d] == 0 ? e : Add(e, I(p.begin[d])));
        }
        return Read(x, src);
      },
      "injective");
  def.args = {x, y};
  def.tensors = {x, y};
  return def;
}

OpDefinition ConcatOp(const ConcatParams& p) {
  OpDefinition def;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    def.args.push_back(Placeholder(absl::StrCat("X", i), p.inputs[i]));
  }
  const std::vector<int64_t> out = p.out_shape();
  Tensor y = Compute(
      "Y", out,
      [&](const std::vector<Expr>& idx) {
        // The last input first, then selects outwards: input i covers [off_i, off_i + e_i).
        std::vector<int64_t> offs;
        int64_t off = 0;
        for (const auto& in : p.inputs) {
          offs.push_back(off);
          off += in[p.axis];
        }
        auto read = [&](size_t i) {
          std::vector<Expr> src = idx;
          if (offs[i] != 0) src[p.axis] = Sub(idx[p.axis], I(offs[i]));
          return Read(def.args[i], src);
        };
        Expr v = read(p.inputs.size() - 1);
        for (size_t i = p.inputs.size() - 1; i-- > 0;) {
          v = Select(LT(idx[p.axis], I(offs[i + 1])), read(i), v);
        }
        return v;
      },
      "injective");
  def.tensors = def.args;
  def.tensors.push_back(y);
  def.args.push_back(y);
  return def;
}

OpDefinition ResizeOp(const ResizeParams& p) {
  OpDefinition def;
  const int64_t b = p.block;
  Tensor x = b > 0 ? Placeholder("X", {p.n, p.c / b, p.h, p.w, b})
                   : Placeholder("X", {p.n, p.c, p.h, p.w});
  std::vector<int64_t> out = {p.n, b > 0 ? p.c / b : p.c, p.oh, p.ow};
  std::vector<std::string> names = {"n", "c", "y", "x"};
  if (b > 0) {
    out.push_back(b);
    names.push_back("cv");
  }
  Tensor y = Compute(
      "Y", out,
      [&](const std::vector<Expr>& idx) {
        const Expr &nn = idx[0], &cc = idx[1];
        // X at (row, column) of the output element's channel.
        auto read = [&](const Expr& row, const Expr& col) {
          if (b > 0) return Read(x, {nn, cc, row, col, idx[4]});
          return Read(x, {nn, cc, row, col});
        };
        if (!p.linear) {
          auto nearest = [&](const Expr& o, int64_t in, int64_t out) -> Expr {
            // Exact integer form of the common upsampling (asymmetric, floor).
            if (p.coord == ResizeCoord::kAsymmetric && p.nearest == NearestMode::kFloor) {
              return Clamp(Div(Mul(o, I(in)), I(out)), in - 1);
            }
            Expr s = ResizeSource(o, in, out, p.coord);
            Expr i;
            switch (p.nearest) {
              case NearestMode::kFloor:
                i = FloorIndex(s);
                break;
              case NearestMode::kCeil:
                i = Sub(I(0), FloorIndex(Sub(F(0.0), s)));
                break;
              case NearestMode::kRoundPreferFloor:  // ceil(s - 0.5)
                i = Sub(I(0), FloorIndex(Sub(F(0.5), s)));
                break;
              case NearestMode::kRoundPreferCeil:  // floor(s + 0.5)
                i = FloorIndex(Add(s, F(0.5)));
                break;
            }
            return Clamp(i, in - 1);
          };
          return read(nearest(idx[2], p.h, p.oh), nearest(idx[3], p.w, p.ow));
        }
        // Bilinear: the four neighbours of the (clamped) source point.
        auto axis = [&](const Expr& o, int64_t in, int64_t out, Expr* i0, Expr* i1, Expr* f) {
          Expr s = Max(ResizeSource(o, in, out, p.coord), F(0.0));
          *i0 = Clamp(FloorIndex(s), in - 1);
          *i1 = Clamp(Add(*i0, I(1)), in - 1);
          *f = Min(Sub(s, Cast(Type::F32(), *i0)), F(1.0));
        };
        Expr y0, y1, fy, x0, x1, fx;
        axis(idx[2], p.h, p.oh, &y0, &y1, &fy);
        axis(idx[3], p.w, p.ow, &x0, &x1, &fx);
        auto lerp = [](const Expr& a, const Expr& b, const Expr& t) {
          return Add(a, Mul(Sub(b, a), t));
        };
        Expr top = lerp(read(y0, x0), read(y0, x1), fx);
        Expr bot = lerp(read(y1, x0), read(y1, x1), fx);
        return lerp(top, bot, fy);
      },
      "injective", names);
  def.args = {x, y};
  def.tensors = {x, y};
  return def;
}

OpDefinition ReduceTensorOp(const ReduceParams& p) {
  OpDefinition def;
  Tensor x = Placeholder("X", p.shape);
  std::vector<IterVar> raxes;
  double count = 1;
  for (int64_t a : p.axes) {
    raxes.push_back(MakeIterVar(absl::StrCat("r", a), p.shape[a], /*reduce=*/true));
    count *= static_cast<double>(p.shape[a]);
  }
  Tensor y = Compute(
      "Y", p.out_shape(),
      [&](const std::vector<Expr>& idx) {
        std::vector<Expr> src = idx;
        for (size_t i = 0; i < p.axes.size(); ++i) src[p.axes[i]] = raxes[i]->var;
        Expr v = Read(x, src);
        switch (p.kind) {
          case ReduceKind::kMean:
            return Sum(Mul(v, F(1.0 / count)), raxes);
          case ReduceKind::kSum:
            return Sum(v, raxes);
          case ReduceKind::kMax:
            return MaxReduce(v, raxes);
          case ReduceKind::kMin:
            return Reduce(ReduceOp::kMin, v, raxes);
        }
        return Sum(v, raxes);
      },
      "reduction");
  def.args = {x, y};
  def.tensors = {x, y};
  return def;
}

#undef LATHE_ASSIGN_OR_RETURN

}  // namespace lathe::ir
