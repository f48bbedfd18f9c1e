#include "ir/ops.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lathe::ir {
namespace {

// --- spec access -----------------------------------------------------------------------------

absl::StatusOr<std::string> GetStr(const WorkloadSpec& spec, const std::string& key) {
  auto it = spec.params.find(key);
  if (it == spec.params.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing key '", key, "' for ", spec.op));
  }
  return it->second;
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

absl::Status ExpectOp(const WorkloadSpec& spec, std::initializer_list<const char*> ops) {
  for (const char* op : ops) {
    if (spec.op == op) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("spec of op '", spec.op, "' where ", *ops.begin(), " was expected"));
}

#define LATHE_ASSIGN_OR_RETURN(lhs, expr)        \
  do {                                           \
    auto _v = (expr);                            \
    if (!_v.ok()) return std::move(_v).status(); \
    lhs = *std::move(_v);                        \
  } while (0)

// --- expression helpers ----------------------------------------------------------------------

Expr I(int64_t v) { return IntImm(v); }
Expr F(double v) { return FloatImm(v); }

// 0 <= e < hi.
Expr InRange(const Expr& e, int64_t hi) { return And(GE(e, I(0)), LT(e, I(hi))); }

// The epilogue stage over `main` (whose last-but-`channel_dim` axis indexes the bias).
Tensor EpilogueStage(const std::string& name, const Tensor& main, const Tensor& bias,
                     int channel_dim, Epilogue e, std::vector<std::string> axis_names) {
  return Compute(
      name, main->shape,
      [&](const std::vector<Expr>& idx) {
        Expr v = Read(main, idx);
        if (EpilogueHasBias(e)) v = Add(v, Read(bias, {idx[channel_dim]}));
        if (EpilogueHasRelu(e)) v = Max(v, F(0.0));
        return v;
      },
      "elementwise", std::move(axis_names));
}

double EpilogueFlops(Epilogue e, double elements) {
  return elements * ((EpilogueHasBias(e) ? 1 : 0) + (EpilogueHasRelu(e) ? 1 : 0));
}

double Product(const std::vector<int64_t>& shape) {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(d);
  return n;
}

}  // namespace

const char* EpilogueName(Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return "none";
    case Epilogue::kBias:
      return "bias";
    case Epilogue::kRelu:
      return "relu";
    case Epilogue::kBiasRelu:
      return "bias_relu";
  }
  return "none";
}

absl::StatusOr<Epilogue> ParseEpilogue(std::string_view name) {
  for (Epilogue e : {Epilogue::kNone, Epilogue::kBias, Epilogue::kRelu, Epilogue::kBiasRelu}) {
    if (name == EpilogueName(e)) return e;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown epilogue '", std::string(name), "' (expected one of none, bias, relu, bias_relu)"));
}

// --- parameters ------------------------------------------------------------------------------

absl::StatusOr<MatmulParams> GetMatmulParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {"matmul", "batch_matmul"}); !s.ok()) return s;
  MatmulParams p;
  if (spec.op == "batch_matmul") LATHE_ASSIGN_OR_RETURN(p.batch, GetInt(spec, "b"));
  LATHE_ASSIGN_OR_RETURN(p.m, GetInt(spec, "m"));
  LATHE_ASSIGN_OR_RETURN(p.n, GetInt(spec, "n"));
  LATHE_ASSIGN_OR_RETURN(p.k, GetInt(spec, "k"));
  std::string e;
  LATHE_ASSIGN_OR_RETURN(e, GetStr(spec, "epilogue"));
  LATHE_ASSIGN_OR_RETURN(p.epilogue, ParseEpilogue(e));
  return p;
}

absl::StatusOr<Conv2dParams> GetConv2dParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {"conv2d"}); !s.ok()) return s;
  Conv2dParams p;
  LATHE_ASSIGN_OR_RETURN(p.n, GetInt(spec, "n"));
  LATHE_ASSIGN_OR_RETURN(p.c, GetInt(spec, "c"));
  LATHE_ASSIGN_OR_RETURN(p.h, GetInt(spec, "h"));
  LATHE_ASSIGN_OR_RETURN(p.w, GetInt(spec, "w"));
  LATHE_ASSIGN_OR_RETURN(p.k, GetInt(spec, "k"));
  LATHE_ASSIGN_OR_RETURN(p.r, GetInt(spec, "r"));
  LATHE_ASSIGN_OR_RETURN(p.s, GetInt(spec, "s"));
  LATHE_ASSIGN_OR_RETURN(p.stride, GetInt(spec, "stride"));
  LATHE_ASSIGN_OR_RETURN(p.pad, GetInt(spec, "pad"));
  LATHE_ASSIGN_OR_RETURN(p.dilation, GetInt(spec, "dilation"));
  LATHE_ASSIGN_OR_RETURN(p.groups, GetInt(spec, "groups"));
  std::string layout, e;
  LATHE_ASSIGN_OR_RETURN(layout, GetStr(spec, "layout"));
  if (layout != "nchw" && layout != "nhwc") {
    return absl::InvalidArgumentError(absl::StrCat("unknown layout '", layout, "'"));
  }
  p.nhwc = layout == "nhwc";
  LATHE_ASSIGN_OR_RETURN(e, GetStr(spec, "epilogue"));
  LATHE_ASSIGN_OR_RETURN(p.epilogue, ParseEpilogue(e));
  return p;
}

absl::StatusOr<Pool2dParams> GetPool2dParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {"pool2d"}); !s.ok()) return s;
  Pool2dParams p;
  LATHE_ASSIGN_OR_RETURN(p.n, GetInt(spec, "n"));
  LATHE_ASSIGN_OR_RETURN(p.c, GetInt(spec, "c"));
  LATHE_ASSIGN_OR_RETURN(p.h, GetInt(spec, "h"));
  LATHE_ASSIGN_OR_RETURN(p.w, GetInt(spec, "w"));
  LATHE_ASSIGN_OR_RETURN(p.r, GetInt(spec, "r"));
  LATHE_ASSIGN_OR_RETURN(p.s, GetInt(spec, "s"));
  LATHE_ASSIGN_OR_RETURN(p.stride, GetInt(spec, "stride"));
  LATHE_ASSIGN_OR_RETURN(p.pad, GetInt(spec, "pad"));
  std::string layout, kind;
  LATHE_ASSIGN_OR_RETURN(layout, GetStr(spec, "layout"));
  LATHE_ASSIGN_OR_RETURN(kind, GetStr(spec, "kind"));
  if (layout != "nchw" && layout != "nhwc") {
    return absl::InvalidArgumentError(absl::StrCat("unknown layout '", layout, "'"));
  }
  if (kind != "max" && kind != "avg") {
    return absl::InvalidArgumentError(absl::StrCat("unknown pool kind '", kind, "'"));
  }
  p.nhwc = layout == "nhwc";
  p.max = kind == "max";
  return p;
}

absl::StatusOr<SoftmaxParams> GetSoftmaxParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {"softmax"}); !s.ok()) return s;
  SoftmaxParams p;
  LATHE_ASSIGN_OR_RETURN(p.m, GetInt(spec, "m"));
  LATHE_ASSIGN_OR_RETURN(p.n, GetInt(spec, "n"));
  return p;
}

absl::StatusOr<LayerNormParams> GetLayerNormParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {"layer_norm"}); !s.ok()) return s;
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

OpDefinition MatmulOp(const MatmulParams& p) {
  const bool batched = p.batch > 0;
  const std::string op = batched ? "batch_matmul" : "matmul";
  const bool has_epilogue = p.epilogue != Epilogue::kNone;
  OpDefinition def;

  auto shape = [&](int64_t a, int64_t b) {
    return batched ? std::vector<int64_t>{p.batch, a, b} : std::vector<int64_t>{a, b};
  };
  Tensor a = Placeholder("A", shape(p.m, p.k));
  Tensor b = Placeholder("B", shape(p.k, p.n));
  Tensor bias = EpilogueHasBias(p.epilogue) ? Placeholder("bias", {p.n}) : nullptr;
  std::vector<std::string> axis_names =
      batched ? std::vector<std::string>{"b", "i", "j"} : std::vector<std::string>{"i", "j"};

  IterVar rk = MakeIterVar("k", p.k, /*reduce=*/true);
  Tensor mm = Compute(
      has_epilogue ? op : "C", shape(p.m, p.n),
      [&](const std::vector<Expr>& idx) {
        if (batched) {
          return Sum(Mul(Read(a, {idx[0], idx[1], rk->var}), Read(b, {idx[0], rk->var, idx[2]})),
                     {rk});
        }
        return Sum(Mul(Read(a, {idx[0], rk->var}), Read(b, {rk->var, idx[1]})), {rk});
      },
      "reduction", axis_names);

  def.args = {a, b};
  def.tensors = {a, b};
  if (bias) {
    def.args.push_back(bias);
    def.tensors.push_back(bias);
  }
  def.tensors.push_back(mm);
  Tensor out = mm;
  if (has_epilogue) {
    out = EpilogueStage("C", mm, bias, batched ? 2 : 1, p.epilogue, axis_names);
    def.tensors.push_back(out);
  }
  def.args.push_back(out);
  const double outputs = Product(out->shape);
  def.flops = 2.0 * outputs * static_cast<double>(p.k) + EpilogueFlops(p.epilogue, outputs);
  return def;
}

OpDefinition Conv2dOp(const Conv2dParams& p) {
  const bool has_epilogue = p.epilogue != Epilogue::kNone;
  const int64_t cpg = p.c / p.groups;  // input channels per group
  const int64_t kpg = p.k / p.groups;  // output channels per group
  const int64_t oh = p.oh(), ow = p.ow();
  const int64_t ph = p.h + 2 * p.pad, pw = p.w + 2 * p.pad;
  OpDefinition def;

  Tensor x =
      p.nhwc ? Placeholder("X", {p.n, p.h, p.w, p.c}) : Placeholder("X", {p.n, p.c, p.h, p.w});
  Tensor wt =
      p.nhwc ? Placeholder("W", {p.r, p.s, cpg, p.k}) : Placeholder("W", {p.k, cpg, p.r, p.s});
  Tensor bias = EpilogueHasBias(p.epilogue) ? Placeholder("bias", {p.k}) : nullptr;
  def.args = {x, wt};
  def.tensors = {x, wt};
  if (bias) {
    def.args.push_back(bias);
    def.tensors.push_back(bias);
  }

  // Padded input: zero outside X. Only the spatial dimensions are padded.
  Tensor in = x;
  if (p.pad > 0) {
    const int hd = p.nhwc ? 1 : 2, wd = hd + 1;
    std::vector<int64_t> shape = x->shape;
    shape[hd] = ph;
    shape[wd] = pw;
    in = Compute(
        "pad", shape,
        [&](const std::vector<Expr>& idx) {
          Expr hh = Sub(idx[hd], I(p.pad));
          Expr ww = Sub(idx[wd], I(p.pad));
          std::vector<Expr> src = idx;
          src[hd] = hh;
          src[wd] = ww;
          return Select(And(InRange(hh, p.h), InRange(ww, p.w)), Read(x, src), F(0.0));
        },
        "pad",
        p.nhwc ? std::vector<std::string>{"n", "h", "w", "c"}
               : std::vector<std::string>{"n", "c", "h", "w"});
    def.tensors.push_back(in);
  }

  IterVar rc = MakeIterVar("rc", cpg, /*reduce=*/true);
  IterVar ry = MakeIterVar("ry", p.r, /*reduce=*/true);
  IterVar rx = MakeIterVar("rx", p.s, /*reduce=*/true);
  // Input channel of output channel `oc` and reduction channel rc.
  auto in_channel = [&](const Expr& oc) {
    if (p.groups == 1) return rc->var;
    return Add(Mul(Div(oc, I(kpg)), I(cpg)), rc->var);
  };
  auto in_pos = [&](const Expr& o, const IterVar& r) {
    Expr base = p.stride == 1 ? o : Mul(o, I(p.stride));
    Expr off = p.dilation == 1 ? r->var : Mul(r->var, I(p.dilation));
    return Add(base, off);
  };
  std::vector<std::string> axis_names = p.nhwc ? std::vector<std::string>{"n", "y", "x", "k"}
                                               : std::vector<std::string>{"n", "k", "y", "x"};
  std::vector<int64_t> out_shape =
      p.nhwc ? std::vector<int64_t>{p.n, oh, ow, p.k} : std::vector<int64_t>{p.n, p.k, oh, ow};
  Tensor conv = Compute(
      has_epilogue ? "conv2d" : "Y", out_shape,
      [&](const std::vector<Expr>& idx) {
        if (p.nhwc) {
          const Expr &nn = idx[0], &yy = idx[1], &xx = idx[2], &kk = idx[3];
          return Sum(Mul(Read(in, {nn, in_pos(yy, ry), in_pos(xx, rx), in_channel(kk)}),
                         Read(wt, {ry->var, rx->var, rc->var, kk})),
                     {ry, rx, rc});
        }
        const Expr &nn = idx[0], &kk = idx[1], &yy = idx[2], &xx = idx[3];
        return Sum(Mul(Read(in, {nn, in_channel(kk), in_pos(yy, ry), in_pos(xx, rx)}),
                       Read(wt, {kk, rc->var, ry->var, rx->var})),
                   {rc, ry, rx});
      },
      "reduction", axis_names);
  def.tensors.push_back(conv);
  Tensor out = conv;
  if (has_epilogue) {
    out = EpilogueStage("Y", conv, bias, p.nhwc ? 3 : 1, p.epilogue, axis_names);
    def.tensors.push_back(out);
  }
  def.args.push_back(out);
  const double outputs = Product(out->shape);
  def.flops =
      2.0 * outputs * static_cast<double>(cpg * p.r * p.s) + EpilogueFlops(p.epilogue, outputs);
  return def;
}

OpDefinition Pool2dOp(const Pool2dParams& p) {
  const int64_t oh = p.oh(), ow = p.ow();
  OpDefinition def;
  Tensor x =
      p.nhwc ? Placeholder("X", {p.n, p.h, p.w, p.c}) : Placeholder("X", {p.n, p.c, p.h, p.w});
  def.args = {x};
  def.tensors = {x};
  const int hd = p.nhwc ? 1 : 2, wd = hd + 1;

  Tensor in = x;
  if (p.pad > 0) {
    std::vector<int64_t> shape = x->shape;
    shape[hd] = p.h + 2 * p.pad;
    shape[wd] = p.w + 2 * p.pad;
    const double fill = p.max ? -std::numeric_limits<double>::infinity() : 0.0;
    in = Compute(
        "pad", shape,
        [&](const std::vector<Expr>& idx) {
          Expr hh = Sub(idx[hd], I(p.pad));
          Expr ww = Sub(idx[wd], I(p.pad));
          std::vector<Expr> src = idx;
          src[hd] = hh;
          src[wd] = ww;
          return Select(And(InRange(hh, p.h), InRange(ww, p.w)), Read(x, src), F(fill));
        },
        "pad",
        p.nhwc ? std::vector<std::string>{"n", "h", "w", "c"}
               : std::vector<std::string>{"n", "c", "h", "w"});
    def.tensors.push_back(in);
  }

  IterVar ry = MakeIterVar("ry", p.r, /*reduce=*/true);
  IterVar rx = MakeIterVar("rx", p.s, /*reduce=*/true);
  auto pos = [&](const Expr& o, const IterVar& r) {
    return Add(p.stride == 1 ? o : Mul(o, I(p.stride)), r->var);
  };
  std::vector<int64_t> out_shape =
      p.nhwc ? std::vector<int64_t>{p.n, oh, ow, p.c} : std::vector<int64_t>{p.n, p.c, oh, ow};
  Tensor y = Compute(
      "Y", out_shape,
      [&](const std::vector<Expr>& idx) {
        std::vector<Expr> src = idx;
        src[hd] = pos(idx[hd], ry);
        src[wd] = pos(idx[wd], rx);
        Expr v = Read(in, src);
        if (p.max) return MaxReduce(v, {ry, rx});
        return Sum(Mul(v, F(1.0 / static_cast<double>(p.r * p.s))), {ry, rx});
      },
      "reduction",
      p.nhwc ? std::vector<std::string>{"n", "y", "x", "c"}
             : std::vector<std::string>{"n", "c", "y", "x"});
  def.tensors.push_back(y);
  def.args.push_back(y);
  def.flops = Product(y->shape) * static_cast<double>(p.r * p.s) * (p.max ? 1 : 2);
  return def;
}

OpDefinition SoftmaxOp(const SoftmaxParams& p) {
  OpDefinition def;
  Tensor x = Placeholder("X", {p.m, p.n});
  IterVar k1 = MakeIterVar("k", p.n, /*reduce=*/true);
  Tensor row_max = Compute("row_max", {p.m},
                           [&](const std::vector<Expr>& idx) {
                             return MaxReduce(Read(x, {idx[0], k1->var}), {k1});
                           },
                           "reduction", {"i"});
  IterVar k2 = MakeIterVar("k", p.n, /*reduce=*/true);
  Tensor exp_sum = Compute(
      "exp_sum", {p.m},
      [&](const std::vector<Expr>& idx) {
        return Sum(Call("exp", {Sub(Read(x, {idx[0], k2->var}), Read(row_max, {idx[0]}))}), {k2});
      },
      "reduction", {"i"});
  Tensor y = Compute("Y", {p.m, p.n},
                     [&](const std::vector<Expr>& idx) {
                       return Div(Call("exp", {Sub(Read(x, idx), Read(row_max, {idx[0]}))}),
                                  Read(exp_sum, {idx[0]}));
                     },
                     "elementwise", {"i", "j"});
  def.args = {x, y};
  def.tensors = {x, row_max, exp_sum, y};
  // max: 1; exp-sum: sub, exp, add; normalize: sub, exp, div.
  def.flops = 7.0 * static_cast<double>(p.m) * static_cast<double>(p.n);
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
  // mean: 2; var: 4; normalize: sub, add, sqrt, div, mul, add.
  def.flops = 12.0 * static_cast<double>(p.m) * static_cast<double>(p.n);
  return def;
}

absl::StatusOr<OpDefinition> BuildOp(const WorkloadSpec& spec) {
  if (spec.op == "matmul" || spec.op == "batch_matmul") {
    absl::StatusOr<MatmulParams> p = GetMatmulParams(spec);
    if (!p.ok()) return p.status();
    return MatmulOp(*p);
  }
  if (spec.op == "conv2d") {
    absl::StatusOr<Conv2dParams> p = GetConv2dParams(spec);
    if (!p.ok()) return p.status();
    return Conv2dOp(*p);
  }
  if (spec.op == "pool2d") {
    absl::StatusOr<Pool2dParams> p = GetPool2dParams(spec);
    if (!p.ok()) return p.status();
    return Pool2dOp(*p);
  }
  if (spec.op == "softmax") {
    absl::StatusOr<SoftmaxParams> p = GetSoftmaxParams(spec);
    if (!p.ok()) return p.status();
    return SoftmaxOp(*p);
  }
  if (spec.op == "layer_norm") {
    absl::StatusOr<LayerNormParams> p = GetLayerNormParams(spec);
    if (!p.ok()) return p.status();
    return LayerNormOp(*p);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown op '", spec.op, "'"));
}

#undef LATHE_ASSIGN_OR_RETURN

}  // namespace lathe::ir
