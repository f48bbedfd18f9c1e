// Lowering of ONNX nodes to lathe kernels (model/kernels.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/fold.h"
#include "model/infer.h"
#include "model/kernels.h"

namespace lathe::model {
namespace {

using ir::StepKind;

#define LATHE_TRY_ASSIGN(lhs, expr)              \
  do {                                           \
    auto _v = (expr);                            \
    if (!_v.ok()) return std::move(_v).status(); \
    lhs = *std::move(_v);                        \
  } while (0)

std::string Dims(const std::vector<int64_t>& d) { return absl::StrJoin(d, "x"); }
std::string Str(int64_t v) { return std::to_string(v); }

// The rank-1 copy [n] of a constant that holds n values (e.g. a [1,C,1,1] bias).
std::string FlatConst(Graph& g, const std::string& name) {
  const Value* v = g.Find(name);
  if (v->shape.size() == 1) return name;
  ConstData d = *v->constant;
  const int64_t n = d.size();
  return g.AddConst(name + ".flat", {n}, std::move(d));
}

class NodeLowering {
 public:
  NodeLowering(Graph& g, Lowered& out) : g_(g), out_(out) {}

  absl::Status Lower(const Node& n);

 private:
  const std::vector<int64_t>& Shape(const std::string& v) const { return g_.Find(v)->shape; }
  bool IsConst(const std::string& v) const { return g_.Const(v) != nullptr; }
  KernelDesc Kernel(const Node& n, std::string op) {
    KernelDesc k;
    k.op = std::move(op);
    k.output = n.outputs[0];
    k.nodes = {n.name};
    return k;
  }
  void Emit(KernelDesc k) { out_.kernels.push_back(std::move(k)); }
  void AliasOf(const std::string& value, const std::string& base) {
    out_.aliases[value] = Alias{base, 0};
  }
  // A unary elementwise kernel of `n`'s first input with the given steps.
  void Unary(const Node& n, ir::EpilogueExpr e) {
    KernelDesc k = Kernel(n, "ewise");
    k.params["a"] = Dims(Shape(n.inputs[0]));
    k.inputs = {n.inputs[0]};
    k.epilogue = std::move(e);
    Emit(std::move(k));
  }
  absl::Status Conv(const Node& n);
  absl::Status Gemm(const Node& n);
  absl::Status MatMul(const Node& n);
  absl::Status Binary(const Node& n);
  absl::Status Pool(const Node& n);

  Graph& g_;
  Lowered& out_;
};

absl::Status NodeLowering::Conv(const Node& n) {
  const bool transposed = n.op == "ConvTranspose";
  if (!IsConst(n.inputs[1]))
    return Unsupported(n, "weights computed at run time are not supported");
  const std::vector<int64_t>& x = Shape(n.inputs[0]);
  const std::vector<int64_t>& wt = Shape(n.inputs[1]);
  Window w;
  LATHE_TRY_ASSIGN(w, WindowOf(n, {x[2], x[3]}, {wt[2], wt[3]}));
  const int64_t groups = n.Int("group", 1);
  KernelDesc k = Kernel(n, transposed ? "conv2d_transpose" : "conv2d");
  k.params = {{"n", Str(x[0])},
              {"c", Str(x[1])},
              {"h", Str(x[2])},
              {"w", Str(x[3])},
              {"k", Str(transposed ? wt[1] * groups : wt[0])},
              {"r", Str(wt[2])},
              {"s", Str(wt[3])},
              {"groups", Str(groups)},
              {"stride", absl::StrCat(w.stride_h, "x", w.stride_w)},
              {"pad", absl::StrCat(w.pad_t, "x", w.pad_l, "x", w.pad_b, "x", w.pad_r)},
              {"dilation", absl::StrCat(w.dil_h, "x", w.dil_w)}};
  if (transposed) {
    std::vector<int64_t> op = n.Ints("output_padding", {0, 0});
    k.params["output_padding"] = absl::StrCat(op[0], "x", op[1]);
  }
  k.inputs = {n.inputs[0], n.inputs[1]};
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    if (!IsConst(n.inputs[2]))
      return Unsupported(n, "a bias computed at run time is not supported");
    k.epilogue.Then(StepKind::kBias);
    k.step_inputs[StepKind::kBias] = FlatConst(g_, n.inputs[2]);
  }
  Emit(std::move(k));
  return absl::OkStatus();
}

absl::Status NodeLowering::Gemm(const Node& n) {
  const bool ta = n.Int("transA", 0) != 0, tb = n.Int("transB", 0) != 0;
  const std::vector<int64_t>& a = Shape(n.inputs[0]);
  const std::vector<int64_t>& b = Shape(n.inputs[1]);
  const int64_t m = ta ? a[1] : a[0], kk = ta ? a[0] : a[1], nn = tb ? b[0] : b[1];
  if ((tb ? b[1] : b[0]) != kk) return Unsupported(n, "inner dimensions do not match");
  KernelDesc k = Kernel(n, "matmul");
  k.params = {{"m", Str(m)}, {"n", Str(nn)}, {"k", Str(kk)}};
  if (ta) k.params["transpose_a"] = "1";
  k.inputs = {n.inputs[0], n.inputs[1]};
  if (tb && g_.Const(n.inputs[1])) {
    // Constant weights (a PyTorch Linear's [n, k]) are transposed once at compile time: the
    // kernel then reads rows of B as the matmul wants them.
    const ConstData& w = *g_.Const(n.inputs[1]);
    ConstData t;
    t.f.resize(w.size());
    for (int64_t r = 0; r < nn; ++r) {
      for (int64_t c = 0; c < kk; ++c) t.f[c * nn + r] = static_cast<float>(w.at(r * kk + c));
    }
    k.inputs[1] = g_.AddConst(n.inputs[1] + ".t", {kk, nn}, std::move(t));
  } else if (tb) {
    k.params["transpose_b"] = "1";
  }
  const float alpha = n.Float("alpha", 1.0f), beta = n.Float("beta", 1.0f);
  if (alpha != 1.0f) k.epilogue.Then(StepKind::kMul, {alpha});
  if (n.inputs.size() > 2 && !n.inputs[2].empty() && beta != 0.0f) {
    const std::string& c = n.inputs[2];
    const std::vector<int64_t>& cs = Shape(c);
    const int64_t count = NumElements(cs);
    if (const ConstData* cd = g_.Const(c)) {
      ConstData scaled = *cd;
      for (float& v : scaled.f) v *= beta;
      if (count == 1) {
        k.epilogue.Then(StepKind::kAdd, {scaled.f[0]});
      } else if (count == nn && cs.back() == nn) {
        k.epilogue.Then(StepKind::kBias);
        k.step_inputs[StepKind::kBias] = g_.AddConst(c + ".bias", {nn}, std::move(scaled));
      } else if (count == m * nn) {
        k.epilogue.Then(StepKind::kRes);
        k.step_inputs[StepKind::kRes] = g_.AddConst(c + ".res", {m, nn}, std::move(scaled));
      } else {
        return Unsupported(n, "a C of shape " + ShapeText(cs) + " is not supported");
      }
    } else {
      if (beta != 1.0f || count != m * nn) {
        return Unsupported(n, "a run-time C must have the output's shape and beta 1");
      }
      k.epilogue.Then(StepKind::kRes);
      k.step_inputs[StepKind::kRes] = c;
    }
  }
  Emit(std::move(k));
  return absl::OkStatus();
}

absl::Status NodeLowering::MatMul(const Node& n) {
  const std::vector<int64_t>& a = Shape(n.inputs[0]);
  const std::vector<int64_t>& b = Shape(n.inputs[1]);
  const int64_t m = a[a.size() - 2], kk = a.back(), nn = b.back();
  const int64_t batch_a = NumElements({a.begin(), a.end() - 2});
  const int64_t batch_b = NumElements({b.begin(), b.end() - 2});
  KernelDesc k = Kernel(n, "matmul");
  k.inputs = {n.inputs[0], n.inputs[1]};
  if (batch_b == 1) {
    // B shared: one matmul over every row of A.
    k.params = {{"m", Str(batch_a * m)}, {"n", Str(nn)}, {"k", Str(kk)}};
  } else if (batch_a == 1) {
    k.op = "batch_matmul";
    k.params = {{"b", Str(batch_b)}, {"m", Str(m)}, {"n", Str(nn)}, {"k", Str(kk)}, {"bcast", "a"}};
  } else {
    std::vector<int64_t> ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
    if (ba != bb) {
      return Unsupported(n, absl::StrCat("batch dimensions ", ShapeText(ba), " and ", ShapeText(bb),
                                         " broadcast partially, which is not supported"));
    }
    k.op = "batch_matmul";
    k.params = {{"b", Str(batch_a)}, {"m", Str(m)}, {"n", Str(nn)}, {"k", Str(kk)}};
  }
  Emit(std::move(k));
  return absl::OkStatus();
}

absl::Status NodeLowering::Binary(const Node& n) {
  const std::string& op = n.op;
  std::string x = n.inputs[0], y = n.inputs[1];
  const std::vector<int64_t>& out = Shape(n.outputs[0]);
  // A scalar constant operand becomes a step of a unary kernel.
  auto scalar = [&](const std::string& v) -> std::optional<float> {
    const ConstData* c = g_.Const(v);
    if (!c || c->size() != 1) return std::nullopt;
    return static_cast<float>(c->at(0));
  };
  std::optional<float> cy = scalar(y), cx = scalar(x);
  if (cy && Shape(x) == out) {
    const float c = *cy;
    ir::EpilogueExpr e;
    if (op == "Add") e.Then(StepKind::kAdd, {c});
    if (op == "Sub") e.Then(StepKind::kAdd, {-c});
    if (op == "Mul") e.Then(StepKind::kMul, {c});
    if (op == "Div") e.Then(StepKind::kDiv, {c});
    if (op == "Pow") e.Then(StepKind::kPow, {c});
    if (op == "Max") e.Then(StepKind::kMax, {c});
    if (op == "Min") e.Then(StepKind::kMin, {c});
    Unary(n, std::move(e));
    return absl::OkStatus();
  }
  if (cx && Shape(y) == out && op != "Pow") {
    const float c = *cx;
    ir::EpilogueExpr e;
    if (op == "Add") e.Then(StepKind::kAdd, {c});
    if (op == "Sub") e.Then(StepKind::kRsub, {c});
    if (op == "Mul") e.Then(StepKind::kMul, {c});
    if (op == "Div") e.Then(StepKind::kRdiv, {c});
    if (op == "Max") e.Then(StepKind::kMax, {c});
    if (op == "Min") e.Then(StepKind::kMin, {c});
    KernelDesc k = Kernel(n, "ewise");
    k.params["a"] = Dims(Shape(y));
    k.inputs = {y};
    k.epilogue = std::move(e);
    Emit(std::move(k));
    return absl::OkStatus();
  }
  KernelDesc k = Kernel(n, "ewise");
  std::string bin = op == "Add"   ? "add"
                    : op == "Sub" ? "sub"
                    : op == "Mul" ? "mul"
                    : op == "Div" ? "div"
                    : op == "Max" ? "max"
                    : op == "Min" ? "min"
                                  : "pow";
  k.params = {{"a", Dims(Shape(x).empty() ? std::vector<int64_t>{1} : Shape(x))},
              {"b", Dims(Shape(y).empty() ? std::vector<int64_t>{1} : Shape(y))},
              {"binary", bin}};
  k.inputs = {x, y};
  Emit(std::move(k));
  return absl::OkStatus();
}

absl::Status NodeLowering::Pool(const Node& n) {
  const std::vector<int64_t>& x = Shape(n.inputs[0]);
  KernelDesc k = Kernel(n, "pool2d");
  k.inputs = {n.inputs[0]};
  k.params = {{"n", Str(x[0])}, {"c", Str(x[1])}, {"h", Str(x[2])}, {"w", Str(x[3])}};
  if (n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool") {
    k.params["r"] = Str(x[2]);
    k.params["s"] = Str(x[3]);
    k.params["kind"] = n.op == "GlobalMaxPool" ? "max" : "avg";
    Emit(std::move(k));
    return absl::OkStatus();
  }
  std::vector<int64_t> ks = n.Ints("kernel_shape");
  Window w;
  LATHE_TRY_ASSIGN(w, WindowOf(n, {x[2], x[3]}, ks));
  const bool avg = n.op == "AveragePool";
  const bool count_pad = n.Int("count_include_pad", 0) != 0;
  if (avg && count_pad && n.Int("ceil_mode", 0) != 0) {
    return Unsupported(n, "ceil_mode with count_include_pad is not supported");
  }
  k.params["r"] = Str(ks[0]);
  k.params["s"] = Str(ks[1]);
  k.params["stride"] = absl::StrCat(w.stride_h, "x", w.stride_w);
  k.params["pad"] = absl::StrCat(w.pad_t, "x", w.pad_l, "x", w.pad_b, "x", w.pad_r);
  k.params["kind"] = avg ? "avg" : "max";
  if (avg && !count_pad) k.params["count_include_pad"] = "0";
  if (std::max(w.pad_t, w.pad_b) >= ks[0] || std::max(w.pad_l, w.pad_r) >= ks[1]) {
    return Unsupported(n, "pads as large as the window are not supported");
  }
  Emit(std::move(k));
  return absl::OkStatus();
}

absl::Status NodeLowering::Lower(const Node& n) {
  const std::string& op = n.op;
  if (op == "Conv" || op == "ConvTranspose") return Conv(n);
  if (op == "Gemm") return Gemm(n);
  if (op == "MatMul") return MatMul(n);
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Max" ||
      op == "Min") {
    return Binary(n);
  }
  if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" ||
      op == "GlobalMaxPool") {
    return Pool(n);
  }
  if (op == "Identity" || op == "Dropout" || op == "Cast" || op == "Reshape" || op == "Flatten" ||
      op == "Squeeze" || op == "Unsqueeze") {
    for (size_t i = 1; i < n.outputs.size(); ++i) {
      if (!n.outputs[i].empty()) return Unsupported(n, "the mask output is not supported");
    }
    AliasOf(n.outputs[0], n.inputs[0]);
    return absl::OkStatus();
  }
  ir::EpilogueExpr e;
  if (op == "Relu") e.Then(StepKind::kRelu);
  if (op == "Sigmoid") e.Then(StepKind::kSigmoid);
  if (op == "Tanh") e.Then(StepKind::kTanh);
  if (op == "Exp") e.Then(StepKind::kExp);
  if (op == "Log") e.Then(StepKind::kLog);
  if (op == "Sqrt") e.Then(StepKind::kSqrt);
  if (op == "Abs") e.Then(StepKind::kAbs);
  if (op == "Neg") e.Then(StepKind::kNeg);
  if (op == "Reciprocal") e.Then(StepKind::kRecip);
  if (op == "Erf") e.Then(StepKind::kErf);
  if (op == "HardSwish") e.Then(StepKind::kHardSwish);
  if (op == "HardSigmoid") {
    e.Then(StepKind::kHardSigmoid, {n.Float("alpha", 0.2f), n.Float("beta", 0.5f)});
  }
  if (op == "LeakyRelu") e.Then(StepKind::kLeakyRelu, {n.Float("alpha", 0.01f)});
  if (op == "Clip") {
    float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
    if (g_.opset < 11) {
      lo = n.Float("min", lo);
      hi = n.Float("max", hi);
    } else {
      for (size_t i = 1; i < 3 && i < n.inputs.size(); ++i) {
        if (n.inputs[i].empty()) continue;
        const ConstData* c = g_.Const(n.inputs[i]);
        if (!c || c->size() != 1) return Unsupported(n, "min and max must be scalar constants");
        (i == 1 ? lo : hi) = static_cast<float>(c->at(0));
      }
    }
    if (std::isfinite(lo) && std::isfinite(hi)) {
      e.Then(StepKind::kClip, {lo, hi});
    } else if (std::isfinite(lo)) {
      e.Then(StepKind::kMax, {lo});
    } else if (std::isfinite(hi)) {
      e.Then(StepKind::kMin, {hi});
    }
  }
  if (!e.empty() || op == "Clip") {
    Unary(n, std::move(e));
    return absl::OkStatus();
  }
  if (op == "BatchNormalization") {
    // Not after a Conv: y = x * scale + shift per channel.
    const std::vector<int64_t>& x = Shape(n.inputs[0]);
    for (size_t i = 1; i < 5; ++i) {
      if (!IsConst(n.inputs[i])) return Unsupported(n, "statistics must be constants");
    }
    const ConstData &gam = *g_.Const(n.inputs[1]), &bet = *g_.Const(n.inputs[2]),
                    &mean = *g_.Const(n.inputs[3]), &var = *g_.Const(n.inputs[4]);
    const float eps = n.Float("epsilon", 1e-5f);
    ConstData scale, shift;
    for (int64_t c = 0; c < x[1]; ++c) {
      const double s = gam.at(c) / std::sqrt(var.at(c) + eps);
      scale.f.push_back(static_cast<float>(s));
      shift.f.push_back(static_cast<float>(bet.at(c) - mean.at(c) * s));
    }
    KernelDesc k = Kernel(n, "ewise");
    k.params["a"] = Dims(x);
    k.inputs = {n.inputs[0]};
    k.epilogue.Then(StepKind::kScale).Then(StepKind::kBias);
    k.step_inputs[StepKind::kScale] = g_.AddConst(n.name + ".scale", {x[1]}, std::move(scale));
    k.step_inputs[StepKind::kBias] = g_.AddConst(n.name + ".shift", {x[1]}, std::move(shift));
    Emit(std::move(k));
    return absl::OkStatus();
  }
  if (op == "Softmax") {
    const std::vector<int64_t>& x = Shape(n.inputs[0]);
    const int64_t rank = static_cast<int64_t>(x.size());
    int64_t axis = 0;
    LATHE_TRY_ASSIGN(axis, NormAxis(n, n.Int("axis", g_.opset >= 13 ? -1 : 1), rank));
    int64_t m = 1, nn = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d) {
      if (d < axis) {
        m *= x[d];
      } else if (d == axis || g_.opset < 13) {
        nn *= x[d];
      } else {
        inner *= x[d];
      }
    }
    KernelDesc k = Kernel(n, "softmax");
    k.params = {{"m", Str(m)}, {"n", Str(nn)}};
    if (inner > 1) k.params["inner"] = Str(inner);
    k.inputs = {n.inputs[0]};
    Emit(std::move(k));
    return absl::OkStatus();
  }
  if (op == "LayerNormalization") {
    const std::vector<int64_t>& x = Shape(n.inputs[0]);
    const int64_t rank = static_cast<int64_t>(x.size());
    int64_t axis = 0;
    LATHE_TRY_ASSIGN(axis, NormAxis(n, n.Int("axis", -1), rank));
    int64_t m = 1, nn = 1;
    for (int64_t d = 0; d < rank; ++d) (d < axis ? m : nn) *= x[d];
    if (!IsConst(n.inputs[1])) return Unsupported(n, "Scale must be a constant");
    std::string beta;
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
      if (!IsConst(n.inputs[2])) return Unsupported(n, "B must be a constant");
      beta = FlatConst(g_, n.inputs[2]);
    } else {
      ConstData z;
      z.f.assign(nn, 0.0f);
      beta = g_.AddConst(n.name + ".beta", {nn}, std::move(z));
    }
    if (NumElements(Shape(n.inputs[1])) != nn || NumElements(g_.Find(beta)->shape) != nn) {
      return Unsupported(n, "Scale and B must have the normalized extent");
    }
    char eps[32];
    std::snprintf(eps, sizeof(eps), "%.9g", static_cast<double>(n.Float("epsilon", 1e-5f)));
    KernelDesc k = Kernel(n, "layer_norm");
    k.params = {{"m", Str(m)}, {"n", Str(nn)}, {"eps", eps}};
    k.inputs = {n.inputs[0], FlatConst(g_, n.inputs[1]), beta};
    Emit(std::move(k));
    return absl::OkStatus();
  }
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin") {
    const std::vector<int64_t>& x = Shape(n.inputs[0]);
    std::vector<int64_t> axes = n.Ints("axes");
    std::optional<std::vector<int64_t>> in_axes;
    LATHE_TRY_ASSIGN(in_axes, IntsInput(g_, n, 1));
    if (in_axes) axes = *in_axes;
    std::set<int64_t> red;
    if (axes.empty() && n.Int("noop_with_empty_axes", 0) != 0) {
      AliasOf(n.outputs[0], n.inputs[0]);
      return absl::OkStatus();
    }
    if (axes.empty()) {
      for (size_t d = 0; d < x.size(); ++d) red.insert(static_cast<int64_t>(d));
    }
    for (int64_t a : axes) {
      int64_t na = 0;
      LATHE_TRY_ASSIGN(na, NormAxis(n, a, static_cast<int64_t>(x.size())));
      red.insert(na);
    }
    KernelDesc k = Kernel(n, "reduce");
    k.params = {{"shape", Dims(x)},
                {"axes", absl::StrJoin(std::vector<int64_t>(red.begin(), red.end()), "x")},
                {"kind", op == "ReduceMean"  ? "mean"
                         : op == "ReduceSum" ? "sum"
                         : op == "ReduceMax" ? "max"
                                             : "min"}};
    k.inputs = {n.inputs[0]};
    Emit(std::move(k));
    return absl::OkStatus();
  }
  if (op == "Transpose") {
    const std::vector<int64_t>& x = Shape(n.inputs[0]);
    std::vector<int64_t> perm = n.Ints("perm");
    if (perm.empty()) {
      for (size_t d = x.size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
    }
    // Moving only extent-1 dimensions keeps the memory order: no copy.
    std::vector<int64_t> kept, kept_perm;
    for (size_t d = 0; d < perm.size(); ++d) {
      if (x[perm[d]] != 1) kept_perm.push_back(perm[d]);
    }
    if (std::is_sorted(kept_perm.begin(), kept_perm.end())) {
      AliasOf(n.outputs[0], n.inputs[0]);
      return absl::OkStatus();
    }
    KernelDesc k = Kernel(n, "transpose");
    k.params = {{"shape", Dims(x)}, {"perm", absl::StrJoin(perm, "x")}};
    k.inputs = {n.inputs[0]};
    Emit(std::move(k));
    return absl::OkStatus();
  }
  if (op == "Concat") {
    const std::vector<int64_t>& out = Shape(n.outputs[0]);
    int64_t axis = 0;
    LATHE_TRY_ASSIGN(axis, NormAxis(n, n.Int("axis", 0), static_cast<int64_t>(out.size())));
    KernelDesc k = Kernel(n, "concat");
    std::vector<std::string> shapes;
    for (const std::string& in : n.inputs) {
      if (in.empty()) continue;
      if (IsConst(in) && NumElements(Shape(in)) == 0) continue;
      shapes.push_back(Dims(Shape(in)));
      k.inputs.push_back(in);
    }
    if (k.inputs.size() == 1) {
      AliasOf(n.outputs[0], k.inputs[0]);
      return absl::OkStatus();
    }
    k.params = {{"axis", Str(axis)}, {"inputs", absl::StrJoin(shapes, "+")}};
    Emit(std::move(k));
    return absl::OkStatus();
  }
  if (op == "Slice" || op == "Split") {
    const std::vector<int64_t>& x = Shape(n.inputs[0]);
    std::vector<SliceSpec> specs;
    LATHE_TRY_ASSIGN(specs, SliceSpecs(g_, n, x));
    for (size_t i = 0; i < specs.size() && i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      KernelDesc k = Kernel(n, "slice");
      k.output = n.outputs[i];
      k.params = {{"shape", Dims(x)},
                  {"begin", absl::StrJoin(specs[i].begin, "x")},
                  {"size", Dims(specs[i].size)},
                  {"step", Dims(specs[i].step)}};
      k.inputs = {n.inputs[0]};
      Emit(std::move(k));
    }
    return absl::OkStatus();
  }
  if (op == "Resize" || op == "Upsample") {
    const std::vector<int64_t>& x = Shape(n.inputs[0]);
    ResizeSpec r;
    LATHE_TRY_ASSIGN(r, ResizeSpecOf(g_, n, x));
    KernelDesc k = Kernel(n, "resize");
    k.params = {{"n", Str(x[0])}, {"c", Str(x[1])},   {"h", Str(x[2])},
                {"w", Str(x[3])}, {"oh", Str(r.oh)},  {"ow", Str(r.ow)},
                {"mode", r.mode}, {"coord", r.coord}, {"nearest", r.nearest}};
    k.inputs = {n.inputs[0]};
    Emit(std::move(k));
    return absl::OkStatus();
  }
  return Unsupported(n, "operator " + op + " is not supported");
}

}  // namespace

absl::StatusOr<Lowered> LowerNodes(Graph& g) {
  Lowered out;
  NodeLowering lowering(g, out);
  for (const Node& n : g.nodes) {
    if (absl::Status s = lowering.Lower(n); !s.ok()) return s;
  }
  return out;
}

}  // namespace lathe::model
