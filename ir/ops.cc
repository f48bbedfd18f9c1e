#include "ir/ops.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ir/ops_internal.h"

namespace lathe::ir {

namespace internal {

absl::StatusOr<std::string> GetStr(const WorkloadSpec& spec, const std::string& key) {
  auto it = spec.params.find(key);
  if (it == spec.params.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing key '", key, "' for ", spec.op));
  }
  return it->second;
}

std::string GetStrOr(const WorkloadSpec& spec, const std::string& key, std::string fallback) {
  auto it = spec.params.find(key);
  return it == spec.params.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> GetInt(const WorkloadSpec& spec, const std::string& key) {
  absl::StatusOr<std::string> s = GetStr(spec, key);
  if (!s.ok()) return s.status();
  int64_t v = 0;
  if (!absl::SimpleAtoi(*s, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", key, "' of ", spec.op, " must be an integer, got '", *s, "'"));
  }
  return v;
}

absl::Status ExpectOp(const WorkloadSpec& spec, std::initializer_list<OpKind> ops) {
  for (OpKind op : ops) {
    if (IsOp(spec.op, op)) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("spec of op '", spec.op, "' where ", OpName(*ops.begin()), " was expected"));
}

absl::StatusOr<std::vector<int64_t>> ParseDims(absl::string_view text, absl::string_view what) {
  std::vector<int64_t> out;
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat("empty ", what));
  for (absl::string_view part : absl::StrSplit(text, 'x')) {
    int64_t v = 0;
    if (part.empty() || !absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", text, "' is not a list of integers joined by 'x'"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> ParsePair(absl::string_view text, absl::string_view what) {
  absl::StatusOr<std::vector<int64_t>> d = ParseDims(text, what);
  if (!d.ok()) return d.status();
  if (d->size() == 1) return std::vector<int64_t>{(*d)[0], (*d)[0]};
  if (d->size() == 2) return d;
  return absl::InvalidArgumentError(absl::StrCat(what, " '", text, "' must be N or HxW"));
}

absl::StatusOr<std::vector<int64_t>> ParsePads(absl::string_view text, absl::string_view what) {
  absl::StatusOr<std::vector<int64_t>> d = ParseDims(text, what);
  if (!d.ok()) return d.status();
  const std::vector<int64_t>& v = *d;
  if (v.size() == 1) return std::vector<int64_t>{v[0], v[0], v[0], v[0]};
  if (v.size() == 2) return std::vector<int64_t>{v[0], v[1], v[0], v[1]};
  if (v.size() == 4) return v;
  return absl::InvalidArgumentError(absl::StrCat(what, " '", text, "' must be N, HxW or TxLxBxR"));
}

absl::Status GetWindow(const WorkloadSpec& spec, Window2d* win) {
  std::string text;
  std::vector<int64_t> v;
  LATHE_IR_ASSIGN_OR_RETURN(text, GetStr(spec, "stride"));
  LATHE_IR_ASSIGN_OR_RETURN(v, ParsePair(text, "stride"));
  win->stride_h = v[0];
  win->stride_w = v[1];
  LATHE_IR_ASSIGN_OR_RETURN(text, GetStr(spec, "pad"));
  LATHE_IR_ASSIGN_OR_RETURN(v, ParsePads(text, "pad"));
  win->pad_t = v[0];
  win->pad_l = v[1];
  win->pad_b = v[2];
  win->pad_r = v[3];
  if (spec.params.count("dilation") != 0) {
    LATHE_IR_ASSIGN_OR_RETURN(text, GetStr(spec, "dilation"));
    LATHE_IR_ASSIGN_OR_RETURN(v, ParsePair(text, "dilation"));
    win->dilation_h = v[0];
    win->dilation_w = v[1];
  }
  return absl::OkStatus();
}

absl::StatusOr<EpilogueExpr> GetEpilogue(const WorkloadSpec& spec) {
  absl::StatusOr<std::string> e = GetStr(spec, "epilogue");
  if (!e.ok()) return e.status();
  absl::StatusOr<EpilogueExpr> x = ParseEpilogueExpr(*e);
  if (x.ok() && x->Has(StepKind::kResUp) && !IsOp(spec.op, OpKind::kEwise)) {
    return absl::InvalidArgumentError(
        absl::StrCat("epilogue step resup is read by ewise kernels only, not ", spec.op));
  }
  return x;
}

std::string DimsText(const std::vector<int64_t>& dims) { return absl::StrJoin(dims, "x"); }

double Product(const std::vector<int64_t>& shape) {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(d);
  return n;
}

std::vector<Tensor> EpilogueInputs(const EpilogueExpr& e, int64_t channels,
                                   const std::vector<int64_t>& out_shape,
                                   const std::string& prefix) {
  std::vector<Tensor> out;
  for (StepKind k : e.TensorSteps()) {
    out.push_back(Placeholder(prefix + StepName(k), k == StepKind::kRes ? out_shape
                                                    : k == StepKind::kResUp
                                                        ? ResUpShape(e, out_shape)
                                                        : std::vector<int64_t>{channels}));
  }
  return out;
}

Tensor EpilogueStage(const std::string& name, const Tensor& main, const EpilogueExpr& e,
                     const std::vector<Tensor>& inputs, int channel_dim,
                     std::vector<std::string> axis_names) {
  return EpilogueStage(
      name, main, e, inputs,
      [channel_dim](const std::vector<Expr>& idx) { return idx[channel_dim]; },
      std::move(axis_names));
}

Tensor EpilogueStage(const std::string& name, const Tensor& main, const EpilogueExpr& e,
                     const std::vector<Tensor>& inputs,
                     const std::function<Expr(const std::vector<Expr>&)>& channel,
                     std::vector<std::string> axis_names, const std::string& prefix) {
  return Compute(
      name, main->shape,
      [&](const std::vector<Expr>& idx) {
        return ApplyEpilogue(e, Read(main, idx), [&](StepKind k) {
          for (const Tensor& t : inputs) {
            if (t->name != prefix + StepName(k)) continue;
            if (k == StepKind::kRes) return Read(t, idx);
            return Read(t, {channel(idx)});
          }
          return FloatImm(0.0);
        });
      },
      "elementwise", std::move(axis_names));
}

// The spatially padded copy of `x` (zero or `fill` outside), or `x` itself without padding.
Tensor PadStage(const Tensor& x, const Window2d& win, bool nhwc, double fill, int64_t h, int64_t w,
                std::vector<Tensor>* tensors) {
  if (!win.has_pad()) return x;
  const int hd = nhwc ? 1 : 2, wd = hd + 1;
  std::vector<int64_t> shape = x->shape;
  shape[hd] = h + win.pad_t + win.pad_b;
  shape[wd] = w + win.pad_l + win.pad_r;
  Tensor in = Compute(
      "pad", shape,
      [&](const std::vector<Expr>& idx) {
        Expr hh = win.pad_t ? Sub(idx[hd], IntImm(win.pad_t)) : idx[hd];
        Expr ww = win.pad_l ? Sub(idx[wd], IntImm(win.pad_l)) : idx[wd];
        std::vector<Expr> src = idx;
        src[hd] = hh;
        src[wd] = ww;
        return Select(And(And(GE(hh, IntImm(0)), LT(hh, IntImm(h))),
                          And(GE(ww, IntImm(0)), LT(ww, IntImm(w)))),
                      Read(x, src), FloatImm(fill));
      },
      "pad",
      nhwc                   ? std::vector<std::string>{"n", "h", "w", "c"}
      : x->shape.size() == 5 ? std::vector<std::string>{"n", "c", "h", "w", "cv"}
                             : std::vector<std::string>{"n", "c", "h", "w"});
  tensors->push_back(in);
  return in;
}

}  // namespace internal

absl::StatusOr<int64_t> LayoutBlock(const std::string& layout) {
  if (layout == "nchw" || layout == "nhwc") return 0;
  int64_t block = 0;
  if (layout.size() > 5 && layout.rfind("nchw", 0) == 0 && layout.back() == 'c' &&
      absl::SimpleAtoi(layout.substr(4, layout.size() - 5), &block) && block >= 1 &&
      block <= 1024) {
    return block;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown layout '", layout, "' (expected nchw, nhwc or nchw{x}c, e.g. nchw16c)"));
}

namespace {

using internal::EpilogueInputs;
using internal::EpilogueStage;
using internal::ExpectOp;
using internal::GetInt;
using internal::GetStr;
using internal::PadStage;
using internal::Product;

#define LATHE_ASSIGN_OR_RETURN LATHE_IR_ASSIGN_OR_RETURN

// --- expression helpers ----------------------------------------------------------------------

Expr I(int64_t v) { return IntImm(v); }
Expr F(double v) { return FloatImm(v); }

// 0 <= e < hi.
Expr InRange(const Expr& e, int64_t hi) { return And(GE(e, I(0)), LT(e, I(hi))); }

}  // namespace

const char* BinaryOpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kNone:
      return "none";
    case BinaryOp::kAdd:
      return "add";
    case BinaryOp::kSub:
      return "sub";
    case BinaryOp::kMul:
      return "mul";
    case BinaryOp::kDiv:
      return "div";
    case BinaryOp::kMax:
      return "max";
    case BinaryOp::kMin:
      return "min";
    case BinaryOp::kPow:
      return "pow";
  }
  return "none";
}

// --- parameters ------------------------------------------------------------------------------

absl::StatusOr<MatmulParams> GetMatmulParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kMatmul, OpKind::kBatchMatmul}); !s.ok()) return s;
  MatmulParams p;
  if (IsOp(spec.op, OpKind::kBatchMatmul)) LATHE_ASSIGN_OR_RETURN(p.batch, GetInt(spec, "b"));
  LATHE_ASSIGN_OR_RETURN(p.m, GetInt(spec, "m"));
  LATHE_ASSIGN_OR_RETURN(p.n, GetInt(spec, "n"));
  LATHE_ASSIGN_OR_RETURN(p.k, GetInt(spec, "k"));
  LATHE_ASSIGN_OR_RETURN(p.epilogue, internal::GetEpilogue(spec));
  p.transpose_a = internal::GetStrOr(spec, "transpose_a", "0") == "1";
  p.transpose_b = internal::GetStrOr(spec, "transpose_b", "0") == "1";
  const std::string bcast = internal::GetStrOr(spec, "bcast", "none");
  p.bcast = bcast == "a" ? Bcast::kA : bcast == "b" ? Bcast::kB : Bcast::kNone;
  if (spec.params.count("bpanel") != 0) {
    LATHE_ASSIGN_OR_RETURN(p.bpanel, GetInt(spec, "bpanel"));
    if (p.transpose_b) return absl::InvalidArgumentError("bpanel needs transpose_b=0");
    if (p.bcast != Bcast::kNone) return absl::InvalidArgumentError("bpanel needs bcast=none");
    if (p.n % p.bpanel != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bpanel ", p.bpanel, " does not divide n=", p.n));
    }
  }
  return p;
}

absl::StatusOr<Conv2dParams> GetConv2dParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kConv2d}); !s.ok()) return s;
  Conv2dParams p;
  LATHE_ASSIGN_OR_RETURN(p.n, GetInt(spec, "n"));
  LATHE_ASSIGN_OR_RETURN(p.c, GetInt(spec, "c"));
  LATHE_ASSIGN_OR_RETURN(p.h, GetInt(spec, "h"));
  LATHE_ASSIGN_OR_RETURN(p.w, GetInt(spec, "w"));
  LATHE_ASSIGN_OR_RETURN(p.k, GetInt(spec, "k"));
  LATHE_ASSIGN_OR_RETURN(p.r, GetInt(spec, "r"));
  LATHE_ASSIGN_OR_RETURN(p.s, GetInt(spec, "s"));
  if (absl::Status st = internal::GetWindow(spec, &p); !st.ok()) return st;
  LATHE_ASSIGN_OR_RETURN(p.groups, GetInt(spec, "groups"));
  std::string layout;
  LATHE_ASSIGN_OR_RETURN(layout, GetStr(spec, "layout"));
  LATHE_ASSIGN_OR_RETURN(p.cblock, LayoutBlock(layout));
  p.nhwc = layout == "nhwc";
  if (spec.params.count("kblock") != 0) {
    if (layout == "nchw" && p.groups == 1) {
      p.plain_input = true;
      p.cblock = p.c;
    } else if (!p.blocked()) {
      return absl::InvalidArgumentError(
          "kblock needs a blocked layout (nchw{x}c), or nchw with groups=1");
    }
    LATHE_ASSIGN_OR_RETURN(p.kblock, GetInt(spec, "kblock"));
  } else {
    p.kblock = p.cblock;
  }
  LATHE_ASSIGN_OR_RETURN(p.epilogue, internal::GetEpilogue(spec));
  return p;
}

namespace internal {

absl::StatusOr<std::pair<WorkloadSpec, WorkloadSpec>> SepConvParts(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kSepConv2d}); !s.ok()) return s;
  WorkloadSpec dw{std::string(OpName(OpKind::kConv2d)), {}};
  WorkloadSpec pw = dw;
  for (const char* key : kSepConvDepthwiseKeys) {
    auto it = spec.params.find(key);
    if (it != spec.params.end()) dw.params[key] = it->second;
  }
  const std::string c = GetStrOr(spec, "c", "1");
  dw.params["k"] = c;
  dw.params["groups"] = c;
  dw.params["epilogue"] = GetStrOr(spec, "dw_epilogue", "none");
  absl::StatusOr<Conv2dParams> d = GetConv2dParams(dw);
  if (!d.ok()) return d.status();
  for (const char* key : {"n", "k", "layout", "kblock", "epilogue"}) {
    auto it = spec.params.find(key);
    if (it != spec.params.end()) pw.params[key] = it->second;
  }
  pw.params["c"] = c;
  pw.params["h"] = absl::StrCat(d->oh());
  pw.params["w"] = absl::StrCat(d->ow());
  pw.params["r"] = pw.params["s"] = pw.params["stride"] = pw.params["dilation"] = "1";
  pw.params["pad"] = "0";
  pw.params["groups"] = "1";
  return std::make_pair(std::move(dw), std::move(pw));
}

}  // namespace internal

absl::StatusOr<SepConv2dParams> GetSepConv2dParams(const WorkloadSpec& spec) {
  absl::StatusOr<std::pair<WorkloadSpec, WorkloadSpec>> parts = internal::SepConvParts(spec);
  if (!parts.ok()) return parts.status();
  SepConv2dParams p;
  LATHE_ASSIGN_OR_RETURN(p.dw, GetConv2dParams(parts->first));
  if (!p.dw.blocked() || p.dw.plain_input) {
    return absl::InvalidArgumentError("sepconv2d needs a blocked layout (nchw{x}c, e.g. nchw8c)");
  }
  if (p.dw.epilogue.Has(StepKind::kRes) || p.dw.epilogue.Has(StepKind::kResUp)) {
    return absl::InvalidArgumentError(
        "dw_epilogue of sepconv2d takes per-channel steps only (bias, scale, shift; no res)");
  }
  LATHE_ASSIGN_OR_RETURN(p.pw, GetConv2dParams(parts->second));
  return p;
}

absl::StatusOr<ConvTransposeParams> GetConvTransposeParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kConv2dTranspose}); !s.ok()) return s;
  ConvTransposeParams p;
  LATHE_ASSIGN_OR_RETURN(p.n, GetInt(spec, "n"));
  LATHE_ASSIGN_OR_RETURN(p.c, GetInt(spec, "c"));
  LATHE_ASSIGN_OR_RETURN(p.h, GetInt(spec, "h"));
  LATHE_ASSIGN_OR_RETURN(p.w, GetInt(spec, "w"));
  LATHE_ASSIGN_OR_RETURN(p.k, GetInt(spec, "k"));
  LATHE_ASSIGN_OR_RETURN(p.r, GetInt(spec, "r"));
  LATHE_ASSIGN_OR_RETURN(p.s, GetInt(spec, "s"));
  if (absl::Status st = internal::GetWindow(spec, &p); !st.ok()) return st;
  LATHE_ASSIGN_OR_RETURN(p.groups, GetInt(spec, "groups"));
  std::string op;
  std::vector<int64_t> v;
  LATHE_ASSIGN_OR_RETURN(op, GetStr(spec, "output_padding"));
  LATHE_ASSIGN_OR_RETURN(v, internal::ParsePair(op, "output_padding"));
  p.output_padding_h = v[0];
  p.output_padding_w = v[1];
  LATHE_ASSIGN_OR_RETURN(p.epilogue, internal::GetEpilogue(spec));
  return p;
}

absl::StatusOr<Pool2dParams> GetPool2dParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kPool2d}); !s.ok()) return s;
  Pool2dParams p;
  LATHE_ASSIGN_OR_RETURN(p.n, GetInt(spec, "n"));
  LATHE_ASSIGN_OR_RETURN(p.c, GetInt(spec, "c"));
  LATHE_ASSIGN_OR_RETURN(p.h, GetInt(spec, "h"));
  LATHE_ASSIGN_OR_RETURN(p.w, GetInt(spec, "w"));
  LATHE_ASSIGN_OR_RETURN(p.r, GetInt(spec, "r"));
  LATHE_ASSIGN_OR_RETURN(p.s, GetInt(spec, "s"));
  if (absl::Status st = internal::GetWindow(spec, &p); !st.ok()) return st;
  std::string layout, kind;
  LATHE_ASSIGN_OR_RETURN(layout, GetStr(spec, "layout"));
  LATHE_ASSIGN_OR_RETURN(kind, GetStr(spec, "kind"));
  LATHE_ASSIGN_OR_RETURN(p.block, LayoutBlock(layout));
  if (kind != "max" && kind != "avg") {
    return absl::InvalidArgumentError(absl::StrCat("unknown pool kind '", kind, "'"));
  }
  p.nhwc = layout == "nhwc";
  p.max = kind == "max";
  p.count_include_pad = internal::GetStrOr(spec, "count_include_pad", "1") == "1";
  return p;
}

absl::StatusOr<SoftmaxParams> GetSoftmaxParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kSoftmax}); !s.ok()) return s;
  SoftmaxParams p;
  LATHE_ASSIGN_OR_RETURN(p.m, GetInt(spec, "m"));
  LATHE_ASSIGN_OR_RETURN(p.n, GetInt(spec, "n"));
  if (spec.params.count("inner") != 0) LATHE_ASSIGN_OR_RETURN(p.inner, GetInt(spec, "inner"));
  return p;
}

absl::StatusOr<LayerNormParams> GetLayerNormParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kLayerNorm}); !s.ok()) return s;
  LayerNormParams p;
  LATHE_ASSIGN_OR_RETURN(p.m, GetInt(spec, "m"));
  LATHE_ASSIGN_OR_RETURN(p.n, GetInt(spec, "n"));
  std::string eps;
  LATHE_ASSIGN_OR_RETURN(eps, GetStr(spec, "eps"));
  if (!absl::SimpleAtod(eps, &p.eps)) {
    return absl::InvalidArgumentError(absl::StrCat("key 'eps' of layer_norm must be a number"));
  }
  return p;
}

// --- operators -------------------------------------------------------------------------------

// A matmul's definition from its inputs and product `mm`: the epilogue inputs `extra` as
// arguments after A and B, the epilogue stage (bias and scale indexed by `channel`) after the
// product when there is one.
OpDefinition MatmulDefinition(const MatmulParams& p, const Tensor& a, const Tensor& b,
                              const Tensor& mm, const std::vector<Tensor>& extra,
                              const std::function<Expr(const std::vector<Expr>&)>& channel,
                              std::vector<std::string> axis_names) {
  OpDefinition def;
  def.args = {a, b};
  def.tensors = {a, b};
  for (const Tensor& t : extra) {
    def.args.push_back(t);
    def.tensors.push_back(t);
  }
  def.tensors.push_back(mm);
  Tensor out = mm;
  if (!p.epilogue.empty()) {
    out = EpilogueStage("C", mm, p.epilogue, extra, channel, std::move(axis_names));
    def.tensors.push_back(out);
  }
  def.args.push_back(out);
  return def;
}

// matmul with B in column panels (MatmulParams::bpanel): C[i, jo, ji] = sum_k A[i, k] *
// B[jo, k, ji], the column j = jo * bpanel + ji; a batch_matmul adds the batch axis b in
// front of every operand (C[b, i, jo, ji]).
OpDefinition MatmulPanelOp(const MatmulParams& p) {
  const int64_t pn = p.bpanel, panels = p.n / pn;
  const bool has_epilogue = !p.epilogue.empty();
  const bool batched = p.batch > 0;
  auto shape = [&](std::vector<int64_t> s) {
    if (batched) s.insert(s.begin(), p.batch);
    return s;
  };
  Tensor a = Placeholder(
      "A", shape(p.transpose_a ? std::vector<int64_t>{p.k, p.m} : std::vector<int64_t>{p.m, p.k}));
  Tensor b = Placeholder("B", shape({panels, p.k, pn}));
  const std::vector<std::string> axis_names = batched
                                                  ? std::vector<std::string>{"b", "i", "jo", "ji"}
                                                  : std::vector<std::string>{"i", "jo", "ji"};
  const std::vector<int64_t> out_shape = shape({p.m, panels, pn});
  const size_t o = batched ? 1 : 0;  // the first non-batch axis
  IterVar rk = MakeIterVar("k", p.k, /*reduce=*/true);
  auto at = [&](const std::vector<Expr>& idx, std::vector<Expr> i) {
    if (batched) i.insert(i.begin(), idx[0]);
    return i;
  };
  Tensor mm = Compute(
      has_epilogue ? (batched ? "batch_matmul" : "matmul") : "C", out_shape,
      [&](const std::vector<Expr>& idx) {
        Expr av = p.transpose_a ? Read(a, at(idx, {rk->var, idx[o]}))
                                : Read(a, at(idx, {idx[o], rk->var}));
        return Sum(Mul(av, Read(b, at(idx, {idx[o + 1], rk->var, idx[o + 2]}))), {rk});
      },
      "reduction", axis_names);
  return MatmulDefinition(
      p, a, b, mm, EpilogueInputs(p.epilogue, p.n, out_shape),
      [pn, o](const std::vector<Expr>& idx) {
        return Add(Mul(idx[o + 1], IntImm(pn)), idx[o + 2]);
      },
      axis_names);
}

OpDefinition MatmulOp(const MatmulParams& p) {
  if (p.bpanel > 0) return MatmulPanelOp(p);
  const bool batched = p.batch > 0;
  const std::string op = batched ? "batch_matmul" : "matmul";
  const bool has_epilogue = !p.epilogue.empty();

  auto shape = [&](int64_t a, int64_t b, bool shared) {
    return batched && !shared ? std::vector<int64_t>{p.batch, a, b} : std::vector<int64_t>{a, b};
  };
  const bool a_shared = p.bcast == Bcast::kA, b_shared = p.bcast == Bcast::kB;
  Tensor a =
      Placeholder("A", p.transpose_a ? shape(p.k, p.m, a_shared) : shape(p.m, p.k, a_shared));
  Tensor b =
      Placeholder("B", p.transpose_b ? shape(p.n, p.k, b_shared) : shape(p.k, p.n, b_shared));
  std::vector<std::string> axis_names =
      batched ? std::vector<std::string>{"b", "i", "j"} : std::vector<std::string>{"i", "j"};
  const std::vector<int64_t> out_shape = shape(p.m, p.n, false);

  IterVar rk = MakeIterVar("k", p.k, /*reduce=*/true);
  auto index = [&](const std::vector<Expr>& idx, Expr row, Expr col, bool shared) {
    std::vector<Expr> out;
    if (batched && !shared) out.push_back(idx[0]);
    out.push_back(std::move(row));
    out.push_back(std::move(col));
    return out;
  };
  Tensor mm = Compute(
      has_epilogue ? op : "C", out_shape,
      [&](const std::vector<Expr>& idx) {
        const Expr& i = idx[batched ? 1 : 0];
        const Expr& j = idx[batched ? 2 : 1];
        Expr av = Read(
            a, p.transpose_a ? index(idx, rk->var, i, a_shared) : index(idx, i, rk->var, a_shared));
        Expr bv = Read(
            b, p.transpose_b ? index(idx, j, rk->var, b_shared) : index(idx, rk->var, j, b_shared));
        return Sum(Mul(av, bv), {rk});
      },
      "reduction", axis_names);

  const int channel = batched ? 2 : 1;
  return MatmulDefinition(
      p, a, b, mm, EpilogueInputs(p.epilogue, p.n, out_shape),
      [channel](const std::vector<Expr>& idx) { return idx[channel]; }, axis_names);
}

// The stages of a convolution in the blocked layout nchw{x}c (see the header) reading `in0`,
// appended to def: its weights `w_name` and epilogue inputs (named after `prefix`) as
// arguments, the padding, the reduction `conv_name` and, with an epilogue or where
// `always_epilogue`, the epilogue stage `out_name`. Returns the convolution's result.
Tensor AppendConv2dBlocked(const Conv2dParams& p, const Tensor& in0, const std::string& w_name,
                           const std::string& prefix, const std::string& conv_name,
                           const std::string& out_name, bool always_epilogue, OpDefinition& def) {
  const bool has_epilogue = !p.epilogue.empty() || always_epilogue;
  const int64_t x = p.cblock, y = p.kblock;
  const int64_t oh = p.oh(), ow = p.ow();
  const bool dw = p.depthwise();
  // A grouped (not depthwise) convolution: output block kb reads the cpg / x input blocks of
  // its group, group kb / (kpg / y), or its cpg lanes of the block that holds the group where
  // a block holds several (op_shapes.cc: the output blocks divide the groups).
  const int64_t cpg = p.c / p.groups, kpg = p.k / p.groups, wx = p.wblock();
  Tensor wt = dw ? Placeholder(w_name, {p.k / y, p.r, p.s, y})
                 : Placeholder(w_name, {p.k / y, cpg / wx, p.r, p.s, wx, y});
  std::vector<int64_t> out_shape = {p.n, p.k / y, oh, ow, y};
  std::vector<Tensor> extra = EpilogueInputs(p.epilogue, p.k, out_shape, prefix);
  def.args.push_back(wt);
  def.tensors.push_back(wt);
  for (const Tensor& t : extra) {
    def.args.push_back(t);
    def.tensors.push_back(t);
  }
  Tensor in = PadStage(in0, p, /*nhwc=*/false, 0.0, p.h, p.w, &def.tensors);
  IterVar rc = MakeIterVar("rc", cpg / wx, /*reduce=*/true);
  IterVar ry = MakeIterVar("ry", p.r, /*reduce=*/true);
  IterVar rx = MakeIterVar("rx", p.s, /*reduce=*/true);
  IterVar rv = MakeIterVar("rv", wx, /*reduce=*/true);
  auto in_pos = [&](const Expr& o, const IterVar& r, int64_t stride, int64_t dilation) {
    Expr base = stride == 1 ? o : Mul(o, I(stride));
    Expr off = dilation == 1 ? r->var : Mul(r->var, I(dilation));
    return Add(base, off);
  };
  std::vector<std::string> axis_names = {"n", "k", "y", "x", "kv"};
  Tensor conv = Compute(
      has_epilogue ? conv_name : out_name, out_shape,
      [&](const std::vector<Expr>& idx) {
        const Expr &nn = idx[0], &kb = idx[1], &yy = idx[2], &xx = idx[3], &kv = idx[4];
        const Expr iy = in_pos(yy, ry, p.stride_h, p.dilation_h);
        const Expr ix = in_pos(xx, rx, p.stride_w, p.dilation_w);
        if (dw) {
          // Channel kb*y + kv reads input channel kb*y + kv: same block, same lane (x == y).
          return Sum(Mul(Read(in, {nn, kb, iy, ix, kv}), Read(wt, {kb, ry->var, rx->var, kv})),
                     {ry, rx});
        }
        // Plain input: one block of every channel (rc has extent 1), channel rv.
        Expr block = rc->var, lane = rv->var;
        if (p.groups > 1) {
          const Expr group = kpg == y ? kb : Div(kb, I(kpg / y));
          if (wx < x) {  // x / cpg groups a block: rc is 0
            block = Div(group, I(x / cpg));
            lane = Add(Mul(Mod(group, I(x / cpg)), I(cpg)), rv->var);
          } else {
            block = Add(cpg == x ? group : Mul(group, I(cpg / x)), rc->var);
          }
        }
        Expr xv = p.plain_input ? Read(in, {nn, Add(Mul(rc->var, I(x)), rv->var), iy, ix})
                                : Read(in, {nn, block, iy, ix, lane});
        return Sum(Mul(xv, Read(wt, {kb, rc->var, ry->var, rx->var, rv->var, kv})),
                   {rc, ry, rx, rv});
      },
      "reduction", axis_names);
  def.tensors.push_back(conv);
  if (!has_epilogue) return conv;
  Tensor out = EpilogueStage(
      out_name, conv, p.epilogue, extra,
      [y](const std::vector<Expr>& idx) { return Add(Mul(idx[1], I(y)), idx[4]); }, axis_names,
      prefix);
  def.tensors.push_back(out);
  return out;
}

OpDefinition Conv2dBlockedOp(const Conv2dParams& p) {
  OpDefinition def;
  Tensor in0 = p.plain_input ? Placeholder("X", {p.n, p.c, p.h, p.w})
                             : Placeholder("X", {p.n, p.c / p.cblock, p.h, p.w, p.cblock});
  def.args = {in0};
  def.tensors = {in0};
  def.args.push_back(
      AppendConv2dBlocked(p, in0, "W", "", "conv2d", "Y", /*always_epilogue=*/false, def));
  return def;
}

OpDefinition SepConv2dOp(const SepConv2dParams& p) {
  OpDefinition def;
  const int64_t x = p.dw.cblock;
  Tensor in0 = Placeholder("X", {p.dw.n, p.dw.c / x, p.dw.h, p.dw.w, x});
  def.args = {in0};
  def.tensors = {in0};
  Tensor mid = AppendConv2dBlocked(p.dw, in0, "DW", "dw_", "dwconv", "dw",
                                   /*always_epilogue=*/true, def);
  def.args.push_back(
      AppendConv2dBlocked(p.pw, mid, "W", "", "conv2d", "Y", /*always_epilogue=*/false, def));
  return def;
}

OpDefinition Conv2dOp(const Conv2dParams& p) {
  if (p.blocked()) return Conv2dBlockedOp(p);
  const bool has_epilogue = !p.epilogue.empty();
  const int64_t cpg = p.c / p.groups;  // input channels per group
  const int64_t kpg = p.k / p.groups;  // output channels per group
  const int64_t oh = p.oh(), ow = p.ow();
  OpDefinition def;

  Tensor x =
      p.nhwc ? Placeholder("X", {p.n, p.h, p.w, p.c}) : Placeholder("X", {p.n, p.c, p.h, p.w});
  Tensor wt =
      p.nhwc ? Placeholder("W", {p.r, p.s, cpg, p.k}) : Placeholder("W", {p.k, cpg, p.r, p.s});
  std::vector<int64_t> out_shape =
      p.nhwc ? std::vector<int64_t>{p.n, oh, ow, p.k} : std::vector<int64_t>{p.n, p.k, oh, ow};
  std::vector<Tensor> extra = EpilogueInputs(p.epilogue, p.k, out_shape);
  def.args = {x, wt};
  def.tensors = {x, wt};
  for (const Tensor& t : extra) {
    def.args.push_back(t);
    def.tensors.push_back(t);
  }

  // Padded input: zero outside X. Only the spatial dimensions are padded.
  Tensor in = PadStage(x, p, p.nhwc, 0.0, p.h, p.w, &def.tensors);

  IterVar rc = MakeIterVar("rc", cpg, /*reduce=*/true);
  IterVar ry = MakeIterVar("ry", p.r, /*reduce=*/true);
  IterVar rx = MakeIterVar("rx", p.s, /*reduce=*/true);
  // Input channel of output channel `oc` and reduction channel rc.
  auto in_channel = [&](const Expr& oc) {
    if (p.groups == 1) return rc->var;
    return Add(Mul(Div(oc, I(kpg)), I(cpg)), rc->var);
  };
  auto in_pos = [&](const Expr& o, const IterVar& r, int64_t stride, int64_t dilation) {
    Expr base = stride == 1 ? o : Mul(o, I(stride));
    Expr off = dilation == 1 ? r->var : Mul(r->var, I(dilation));
    return Add(base, off);
  };
  std::vector<std::string> axis_names = p.nhwc ? std::vector<std::string>{"n", "y", "x", "k"}
                                               : std::vector<std::string>{"n", "k", "y", "x"};
  Tensor conv = Compute(
      has_epilogue ? "conv2d" : "Y", out_shape,
      [&](const std::vector<Expr>& idx) {
        if (p.nhwc) {
          const Expr &nn = idx[0], &yy = idx[1], &xx = idx[2], &kk = idx[3];
          return Sum(Mul(Read(in, {nn, in_pos(yy, ry, p.stride_h, p.dilation_h),
                                   in_pos(xx, rx, p.stride_w, p.dilation_w), in_channel(kk)}),
                         Read(wt, {ry->var, rx->var, rc->var, kk})),
                     {ry, rx, rc});
        }
        const Expr &nn = idx[0], &kk = idx[1], &yy = idx[2], &xx = idx[3];
        return Sum(Mul(Read(in, {nn, in_channel(kk), in_pos(yy, ry, p.stride_h, p.dilation_h),
                                 in_pos(xx, rx, p.stride_w, p.dilation_w)}),
                       Read(wt, {kk, rc->var, ry->var, rx->var})),
                   {rc, ry, rx});
      },
      "reduction", axis_names);
  def.tensors.push_back(conv);
  Tensor out = conv;
  if (has_epilogue) {
    out = EpilogueStage("Y", conv, p.epilogue, extra, p.nhwc ? 3 : 1, axis_names);
    def.tensors.push_back(out);
  }
  def.args.push_back(out);
  return def;
}

OpDefinition ConvTransposeOp(const ConvTransposeParams& p) {
  const bool has_epilogue = !p.epilogue.empty();
  const int64_t cpg = p.c / p.groups, kpg = p.k / p.groups;
  const int64_t oh = p.oh(), ow = p.ow();
  OpDefinition def;
  Tensor x = Placeholder("X", {p.n, p.c, p.h, p.w});
  Tensor wt = Placeholder("W", {p.c, kpg, p.r, p.s});
  const std::vector<int64_t> out_shape = {p.n, p.k, oh, ow};
  std::vector<Tensor> extra = EpilogueInputs(p.epilogue, p.k, out_shape);
  def.args = {x, wt};
  def.tensors = {x, wt};
  for (const Tensor& t : extra) {
    def.args.push_back(t);
    def.tensors.push_back(t);
  }
  IterVar rc = MakeIterVar("rc", cpg, /*reduce=*/true);
  IterVar ry = MakeIterVar("ry", p.r, /*reduce=*/true);
  IterVar rx = MakeIterVar("rx", p.s, /*reduce=*/true);
  std::vector<std::string> axis_names = {"n", "k", "y", "x"};
  // Output (y, x) gathers input (iy, ix) where iy * stride = y + pad_t - ry * dilation.
  auto src = [&](const Expr& o, const IterVar& r, int64_t pad, int64_t dil) {
    Expr t = Add(o, I(pad));
    return dil == 1 ? Sub(t, r->var) : Sub(t, Mul(r->var, I(dil)));
  };
  // Stride equal to the kernel, no padding (the 2x2/2 upsampling of detection heads): every
  // output pixel takes exactly one tap, (y mod stride, x mod stride), of input (y / stride, ...):
  // a reduction over the input channels only, without the selects of the general form.
  const bool one_tap = p.stride_h == p.r && p.stride_w == p.s && !p.has_pad() &&
                       p.dilation_h == 1 && p.dilation_w == 1 && p.output_padding_h == 0 &&
                       p.output_padding_w == 0;
  Tensor conv = Compute(
      has_epilogue ? "conv2d_transpose" : "Y", out_shape,
      [&](const std::vector<Expr>& idx) {
        const Expr &nn = idx[0], &kk = idx[1], &yy = idx[2], &xx = idx[3];
        if (one_tap) {
          Expr ch = p.groups == 1 ? rc->var : Add(Mul(Div(kk, I(kpg)), I(cpg)), rc->var);
          Expr oc = p.groups == 1 ? kk : Mod(kk, I(kpg));
          return Sum(Mul(Read(x, {nn, ch, Div(yy, I(p.r)), Div(xx, I(p.s))}),
                         Read(wt, {ch, oc, Mod(yy, I(p.r)), Mod(xx, I(p.s))})),
                     {rc});
        }
        Expr ty = src(yy, ry, p.pad_t, p.dilation_h);
        Expr tx = src(xx, rx, p.pad_l, p.dilation_w);
        Expr iy = p.stride_h == 1 ? ty : Div(ty, I(p.stride_h));
        Expr ix = p.stride_w == 1 ? tx : Div(tx, I(p.stride_w));
        Expr ok = And(InRange(iy, p.h), InRange(ix, p.w));
        if (p.stride_h != 1) ok = And(ok, EQ(Mod(ty, I(p.stride_h)), I(0)));
        if (p.stride_w != 1) ok = And(ok, EQ(Mod(tx, I(p.stride_w)), I(0)));
        Expr ch = p.groups == 1 ? rc->var : Add(Mul(Div(kk, I(kpg)), I(cpg)), rc->var);
        Expr oc = p.groups == 1 ? kk : Mod(kk, I(kpg));
        // Clamped indices keep the reads in bounds; the select drops them.
        Expr cy = Max(Min(iy, I(p.h - 1)), I(0));
        Expr cx = Max(Min(ix, I(p.w - 1)), I(0));
        Expr prod = Mul(Read(x, {nn, ch, cy, cx}), Read(wt, {ch, oc, ry->var, rx->var}));
        return Sum(Select(ok, prod, F(0.0)), {rc, ry, rx});
      },
      "reduction", axis_names);
  def.tensors.push_back(conv);
  Tensor out = conv;
  if (has_epilogue) {
    out = EpilogueStage("Y", conv, p.epilogue, extra, 1, axis_names);
    def.tensors.push_back(out);
  }
  def.args.push_back(out);
  return def;
}

OpDefinition Pool2dOp(const Pool2dParams& p) {
  const int64_t oh = p.oh(), ow = p.ow();
  OpDefinition def;
  Tensor x = p.block > 0 ? Placeholder("X", {p.n, p.c / p.block, p.h, p.w, p.block})
             : p.nhwc    ? Placeholder("X", {p.n, p.h, p.w, p.c})
                         : Placeholder("X", {p.n, p.c, p.h, p.w});
  def.args = {x};
  def.tensors = {x};
  const int hd = p.nhwc ? 1 : 2, wd = hd + 1;
  const double fill = p.max ? -std::numeric_limits<double>::infinity() : 0.0;
  Tensor in = PadStage(x, p, p.nhwc, fill, p.h, p.w, &def.tensors);

  IterVar ry = MakeIterVar("ry", p.r, /*reduce=*/true);
  IterVar rx = MakeIterVar("rx", p.s, /*reduce=*/true);
  auto pos = [&](const Expr& o, const IterVar& r, int64_t stride) {
    return Add(stride == 1 ? o : Mul(o, I(stride)), r->var);
  };
  // Elements of the window inside X (avg without counting the padding): the window
  // [o*stride - pad, o*stride - pad + r) clipped to [0, extent).
  auto inside = [&](const Expr& o, int64_t stride, int64_t pad, int64_t r, int64_t extent) {
    Expr lo = Sub(Mul(o, I(stride)), I(pad));
    return Sub(Min(Add(lo, I(r)), I(extent)), Max(lo, I(0)));
  };
  std::vector<int64_t> out_shape = p.block > 0
                                       ? std::vector<int64_t>{p.n, p.c / p.block, oh, ow, p.block}
                                   : p.nhwc ? std::vector<int64_t>{p.n, oh, ow, p.c}
                                            : std::vector<int64_t>{p.n, p.c, oh, ow};
  std::vector<std::string> axis_names = p.block > 0
                                            ? std::vector<std::string>{"n", "c", "y", "x", "cv"}
                                        : p.nhwc ? std::vector<std::string>{"n", "y", "x", "c"}
                                                 : std::vector<std::string>{"n", "c", "y", "x"};
  const bool divide_after = !p.max && !p.count_include_pad && p.has_pad();
  Tensor y = Compute(
      divide_after ? "pool_sum" : "Y", out_shape,
      [&](const std::vector<Expr>& idx) {
        std::vector<Expr> src = idx;
        src[hd] = pos(idx[hd], ry, p.stride_h);
        src[wd] = pos(idx[wd], rx, p.stride_w);
        Expr v = Read(in, src);
        if (p.max) return MaxReduce(v, {ry, rx});
        if (divide_after) return Sum(v, {ry, rx});
        return Sum(Mul(v, F(1.0 / static_cast<double>(p.r * p.s))), {ry, rx});
      },
      "reduction", axis_names);
  def.tensors.push_back(y);
  if (divide_after) {
    Tensor sum = y;
    y = Compute(
        "Y", out_shape,
        [&](const std::vector<Expr>& idx) {
          Expr count = Mul(inside(idx[hd], p.stride_h, p.pad_t, p.r, p.h),
                           inside(idx[wd], p.stride_w, p.pad_l, p.s, p.w));
          return Div(Read(sum, idx), Cast(Type::F32(), count));
        },
        "elementwise", axis_names);
    def.tensors.push_back(y);
  }
  def.args.push_back(y);
  return def;
}

OpDefinition SoftmaxOp(const SoftmaxParams& p) {
  OpDefinition def;
  const bool inner = p.inner > 1;
  // Rows are (i) or (i, l); the reduced axis is k.
  const std::vector<int64_t> shape =
      inner ? std::vector<int64_t>{p.m, p.n, p.inner} : std::vector<int64_t>{p.m, p.n};
  const std::vector<int64_t> rows =
      inner ? std::vector<int64_t>{p.m, p.inner} : std::vector<int64_t>{p.m};
  const std::vector<std::string> row_axes =
      inner ? std::vector<std::string>{"i", "l"} : std::vector<std::string>{"i"};
  auto at = [&](const std::vector<Expr>& row, const Expr& k) {
    return inner ? std::vector<Expr>{row[0], k, row[1]} : std::vector<Expr>{row[0], k};
  };
  Tensor x = Placeholder("X", shape);
  IterVar k1 = MakeIterVar("k", p.n, /*reduce=*/true);
  Tensor row_max = Compute(
      "row_max", rows,
      [&](const std::vector<Expr>& idx) { return MaxReduce(Read(x, at(idx, k1->var)), {k1}); },
      "reduction", row_axes);
  IterVar k2 = MakeIterVar("k", p.n, /*reduce=*/true);
  Tensor exp_sum = Compute(
      "exp_sum", rows,
      [&](const std::vector<Expr>& idx) {
        return Sum(Call("exp", {Sub(Read(x, at(idx, k2->var)), Read(row_max, idx))}), {k2});
      },
      "reduction", row_axes);
  Tensor y = Compute(
      "Y", shape,
      [&](const std::vector<Expr>& idx) {
        std::vector<Expr> row =
            inner ? std::vector<Expr>{idx[0], idx[2]} : std::vector<Expr>{idx[0]};
        return Div(Call("exp", {Sub(Read(x, idx), Read(row_max, row))}), Read(exp_sum, row));
      },
      "elementwise",
      inner ? std::vector<std::string>{"i", "j", "l"} : std::vector<std::string>{"i", "j"});
  def.args = {x, y};
  def.tensors = {x, row_max, exp_sum, y};
  return def;
}

OpDefinition LayerNormOp(const LayerNormParams& p) {
  OpDefinition def;
  Tensor x = Placeholder("X", {p.m, p.n});
  Tensor gamma = Placeholder("gamma", {p.n});
  Tensor beta = Placeholder("beta", {p.n});
  const double inv_n = 1.0 / static_cast<double>(p.n);
  IterVar k1 = MakeIterVar("k", p.n, /*reduce=*/true);
  Tensor mean = Compute("mean", {p.m},
                        [&](const std::vector<Expr>& idx) {
                          return Sum(Mul(Read(x, {idx[0], k1->var}), F(inv_n)), {k1});
                        },
                        "reduction", {"i"});
  IterVar k2 = MakeIterVar("k", p.n, /*reduce=*/true);
  Tensor var = Compute("var", {p.m},
                       [&](const std::vector<Expr>& idx) {
                         Expr d = Sub(Read(x, {idx[0], k2->var}), Read(mean, {idx[0]}));
                         return Sum(Mul(Mul(d, d), F(inv_n)), {k2});
                       },
                       "reduction", {"i"});
  Tensor y = Compute("Y", {p.m, p.n},
                     [&](const std::vector<Expr>& idx) {
                       Expr norm = Div(Sub(Read(x, idx), Read(mean, {idx[0]})),
                                       Call("sqrt", {Add(Read(var, {idx[0]}), F(p.eps))}));
                       return Add(Mul(norm, Read(gamma, {idx[1]})), Read(beta, {idx[1]}));
                     },
                     "elementwise", {"i", "j"});
  def.args = {x, gamma, beta, y};
  def.tensors = {x, gamma, beta, mean, var, y};
  return def;
}

absl::StatusOr<OpDefinition> BuildOp(const WorkloadSpec& spec) {
  const OpInfo* op = FindOp(spec.op);
  if (op == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown op '", spec.op, "'"));
  absl::StatusOr<OpDefinition> def = op->build(spec);
  if (!def.ok()) return def.status();
  absl::StatusOr<double> flops = op->flops(spec);
  if (!flops.ok()) return flops.status();
  def->flops = *flops;
  return def;
}

#undef LATHE_ASSIGN_OR_RETURN

}  // namespace lathe::ir
