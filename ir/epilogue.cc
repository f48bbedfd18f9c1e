#include "ir/epilogue.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace lathe::ir {
namespace {

struct StepDef {
  StepKind kind;
  const char* name;
  int num_args;
  double flops;  // per element, roughly
};

constexpr StepDef kSteps[] = {
    {StepKind::kBias, "bias", 0, 1},       {StepKind::kScale, "scale", 0, 1},
    {StepKind::kRes, "res", 0, 1},         {StepKind::kRelu, "relu", 0, 1},
    {StepKind::kSigmoid, "sigmoid", 0, 4}, {StepKind::kTanh, "tanh", 0, 4},
    {StepKind::kExp, "exp", 0, 1},         {StepKind::kLog, "log", 0, 1},
    {StepKind::kSqrt, "sqrt", 0, 1},       {StepKind::kAbs, "abs", 0, 1},
    {StepKind::kNeg, "neg", 0, 1},         {StepKind::kRecip, "recip", 0, 1},
    {StepKind::kErf, "erf", 0, 16},        {StepKind::kHardSwish, "hswish", 0, 5},
    {StepKind::kSwish, "swish", 0, 5},     {StepKind::kGelu, "gelu", 0, 20},
    {StepKind::kClip, "clip", 2, 2},       {StepKind::kHardSigmoid, "hsig", 2, 4},
    {StepKind::kLeakyRelu, "lrelu", 1, 2}, {StepKind::kMul, "mul", 1, 1},
    {StepKind::kAdd, "add", 1, 1},         {StepKind::kDiv, "div", 1, 1},
    {StepKind::kRsub, "rsub", 1, 1},       {StepKind::kRdiv, "rdiv", 1, 1},
    {StepKind::kPow, "pow", 1, 1},         {StepKind::kMax, "max", 1, 1},
    {StepKind::kMin, "min", 1, 1},         {StepKind::kShift, "shift", 0, 1},
    {StepKind::kResUp, "resup", 2, 1},
};

const StepDef& Def(StepKind kind) {
  for (const StepDef& d : kSteps) {
    if (d.kind == kind) return d;
  }
  return kSteps[0];
}

std::string FloatText(float v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(v));
  return buf;
}

Expr F(double v) { return FloatImm(v); }

}  // namespace

bool IsTensorStep(StepKind kind) {
  return kind == StepKind::kBias || kind == StepKind::kScale || kind == StepKind::kShift ||
         kind == StepKind::kRes || kind == StepKind::kResUp;
}

std::vector<int64_t> ResUpFactors(const EpilogueExpr& e, size_t rank) {
  for (const EpilogueStep& s : e.steps) {
    if (s.kind != StepKind::kResUp || rank < 4) continue;
    std::vector<int64_t> f(rank, 1);
    f[2] = static_cast<int64_t>(s.args[0]);
    f[3] = static_cast<int64_t>(s.args[1]);
    return f;
  }
  return {};
}

std::vector<int64_t> ResUpShape(const EpilogueExpr& e, const std::vector<int64_t>& out) {
  std::vector<int64_t> shape = out;
  const std::vector<int64_t> f = ResUpFactors(e, out.size());
  for (size_t d = 0; d < f.size(); ++d) shape[d] = (out[d] + f[d] - 1) / f[d];
  return shape;
}

const char* StepName(StepKind kind) { return Def(kind).name; }

std::string EpilogueExpr::ToString() const {
  if (steps.empty()) return "none";
  std::vector<std::string> parts;
  for (const EpilogueStep& s : steps) {
    std::string p = StepName(s.kind);
    for (size_t i = 0; i < s.args.size(); ++i)
      absl::StrAppend(&p, i ? ":" : "", FloatText(s.args[i]));
    parts.push_back(std::move(p));
  }
  return absl::StrJoin(parts, "_");
}

std::vector<StepKind> EpilogueExpr::TensorSteps() const {
  std::vector<StepKind> out;
  for (const EpilogueStep& s : steps) {
    if (IsTensorStep(s.kind)) out.push_back(s.kind);
  }
  return out;
}

bool EpilogueExpr::Has(StepKind kind) const {
  return std::any_of(steps.begin(), steps.end(),
                     [&](const EpilogueStep& s) { return s.kind == kind; });
}

double EpilogueExpr::FlopsPerElement() const {
  double f = 0;
  for (const EpilogueStep& s : steps) f += Def(s.kind).flops;
  return f;
}

EpilogueExpr& EpilogueExpr::Then(StepKind kind, std::vector<float> args) {
  steps.push_back({kind, std::move(args)});
  return *this;
}

absl::StatusOr<EpilogueExpr> ParseEpilogueExpr(absl::string_view text) {
  EpilogueExpr e;
  if (text == "none") return e;
  if (text.empty()) return absl::InvalidArgumentError("empty epilogue");
  for (absl::string_view part : absl::StrSplit(text, '_')) {
    size_t name_end = 0;
    while (name_end < part.size() && part[name_end] >= 'a' && part[name_end] <= 'z') ++name_end;
    const std::string name(part.substr(0, name_end));
    const StepDef* def = nullptr;
    for (const StepDef& d : kSteps) {
      if (name == d.name) def = &d;
    }
    if (def == nullptr) {
      std::vector<std::string> names;
      for (const StepDef& d : kSteps) names.push_back(d.name);
      return absl::InvalidArgumentError(absl::StrCat("unknown epilogue step '", part,
                                                     "' (expected none or steps joined by '_' of ",
                                                     absl::StrJoin(names, ", "), ")"));
    }
    EpilogueStep step{def->kind, {}};
    const absl::string_view rest = part.substr(name_end);
    if (def->num_args == 0) {
      if (!rest.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("epilogue step '", part, "': ", name, " takes no constant"));
      }
    } else {
      std::vector<absl::string_view> nums =
          rest.empty() ? std::vector<absl::string_view>{} : absl::StrSplit(rest, ':');
      if (static_cast<int>(nums.size()) != def->num_args) {
        return absl::InvalidArgumentError(
            absl::StrCat("epilogue step '", part, "': ", name, " takes ", def->num_args,
                         " constant", def->num_args == 1 ? "" : "s", " (e.g. ", name,
                         def->num_args == 1 ? "0.5" : "0:6", ")"));
      }
      for (absl::string_view n : nums) {
        double v = 0;
        if (!absl::SimpleAtod(n, &v) || !std::isfinite(v) || std::fabs(v) > 3.0e38) {
          return absl::InvalidArgumentError(
              absl::StrCat("epilogue step '", part, "': '", n, "' is not a finite number"));
        }
        step.args.push_back(static_cast<float>(v));
      }
    }
    if (step.kind == StepKind::kResUp) {
      for (float f : step.args) {
        if (f < 1 || f > 65536 || f != static_cast<float>(static_cast<int64_t>(f))) {
          return absl::InvalidArgumentError(absl::StrCat(
              "epilogue step '", part, "': resup's factors are integers from 1 to 65536"));
        }
      }
    }
    if (IsTensorStep(step.kind) && e.Has(step.kind)) {
      return absl::InvalidArgumentError(
          absl::StrCat("epilogue '", text, "' has the tensor step '", name, "' twice"));
    }
    e.steps.push_back(std::move(step));
  }
  return e;
}

Expr ErfApprox(const Expr& x) {
  // erf(|x|) = 1 - (a1 t + a2 t^2 + ... + a5 t^5) exp(-x^2), t = 1 / (1 + p |x|).
  constexpr double p = 0.3275911, a1 = 0.254829592, a2 = -0.284496736, a3 = 1.421413741,
                   a4 = -1.453152027, a5 = 1.061405429;
  Expr ax = Call("abs", {x});
  Expr t = Div(F(1.0), Add(F(1.0), Mul(F(p), ax)));
  Expr poly =
      Mul(t, Add(F(a1), Mul(t, Add(F(a2), Mul(t, Add(F(a3), Mul(t, Add(F(a4), Mul(t, F(a5))))))))));
  Expr y = Sub(F(1.0), Mul(poly, Call("exp", {Sub(F(0.0), Mul(x, x))})));
  // The sign as x / |x| (no select: vector code keeps it branch-free; y(0) = 0 anyway).
  return Div(Mul(y, x), Add(ax, F(1e-30)));
}

Expr ApplyEpilogue(const EpilogueExpr& e, Expr v, const std::function<Expr(StepKind)>& read) {
  auto sigmoid = [](const Expr& x) {
    return Div(F(1.0), Add(F(1.0), Call("exp", {Sub(F(0.0), x)})));
  };
  for (const EpilogueStep& s : e.steps) {
    const auto a = [&](int i) { return F(static_cast<double>(s.args[i])); };
    switch (s.kind) {
      case StepKind::kBias:
      case StepKind::kShift:
      case StepKind::kRes:
      case StepKind::kResUp:
        v = Add(v, read(s.kind));
        break;
      case StepKind::kScale:
        v = Mul(v, read(s.kind));
        break;
      case StepKind::kRelu:
        v = Max(v, F(0.0));
        break;
      case StepKind::kSigmoid:
        v = sigmoid(v);
        break;
      case StepKind::kTanh:
        v = Call("tanh", {v});
        break;
      case StepKind::kExp:
        v = Call("exp", {v});
        break;
      case StepKind::kLog:
        v = Call("log", {v});
        break;
      case StepKind::kSqrt:
        v = Call("sqrt", {v});
        break;
      case StepKind::kAbs:
        v = Call("abs", {v});
        break;
      case StepKind::kNeg:
        v = Sub(F(0.0), v);
        break;
      case StepKind::kRecip:
        v = Div(F(1.0), v);
        break;
      case StepKind::kErf:
        v = ErfApprox(v);
        break;
      case StepKind::kHardSwish:
        // x * relu6(x + 3) / 6, the division a product (a vector divide per element costs
        // more than the rest; 1/6 rounded is within an ulp)
        v = Mul(Mul(v, Min(Max(Add(v, F(3.0)), F(0.0)), F(6.0))), F(1.0 / 6.0));
        break;
      case StepKind::kSwish:
        v = Mul(v, sigmoid(v));
        break;
      case StepKind::kGelu:
        v = Mul(Mul(v, F(0.5)), Add(F(1.0), ErfApprox(Mul(v, F(M_SQRT1_2)))));
        break;
      case StepKind::kClip:
        v = Min(Max(v, a(0)), a(1));
        break;
      case StepKind::kHardSigmoid:
        v = Min(Max(Add(Mul(v, a(0)), a(1)), F(0.0)), F(1.0));
        break;
      case StepKind::kLeakyRelu:
        v = Select(LT(v, F(0.0)), Mul(v, a(0)), v);
        break;
      case StepKind::kMul:
        v = Mul(v, a(0));
        break;
      case StepKind::kAdd:
        v = Add(v, a(0));
        break;
      case StepKind::kDiv:
        v = Div(v, a(0));
        break;
      case StepKind::kRsub:
        v = Sub(a(0), v);
        break;
      case StepKind::kRdiv:
        v = Div(a(0), v);
        break;
      case StepKind::kPow:
        if (s.args[0] == std::round(s.args[0]) && std::fabs(s.args[0]) <= 4 && s.args[0] != 0) {
          // Small integer powers by multiplication: exp(c log v) is NaN for negative v.
          Expr base = v;
          for (int i = 1; i < static_cast<int>(std::fabs(s.args[0])); ++i) v = Mul(v, base);
          if (s.args[0] < 0) v = Div(F(1.0), v);
        } else if (s.args[0] == 0.5f) {
          v = Call("sqrt", {v});
        } else {
          v = Call("exp", {Mul(a(0), Call("log", {v}))});
        }
        break;
      case StepKind::kMax:
        v = Max(v, a(0));
        break;
      case StepKind::kMin:
        v = Min(v, a(0));
        break;
    }
  }
  return v;
}

double ApplyEpilogueRef(const EpilogueExpr& e, double v,
                        const std::function<double(StepKind)>& value) {
  auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  for (const EpilogueStep& s : e.steps) {
    const auto a = [&](int i) { return static_cast<double>(s.args[i]); };
    switch (s.kind) {
      case StepKind::kBias:
      case StepKind::kShift:
      case StepKind::kRes:
      case StepKind::kResUp:
        v += value(s.kind);
        break;
      case StepKind::kScale:
        v *= value(s.kind);
        break;
      case StepKind::kRelu:
        v = std::max(v, 0.0);
        break;
      case StepKind::kSigmoid:
        v = sigmoid(v);
        break;
      case StepKind::kTanh:
        v = std::tanh(v);
        break;
      case StepKind::kExp:
        v = std::exp(v);
        break;
      case StepKind::kLog:
        v = std::log(v);
        break;
      case StepKind::kSqrt:
        v = std::sqrt(v);
        break;
      case StepKind::kAbs:
        v = std::fabs(v);
        break;
      case StepKind::kNeg:
        v = -v;
        break;
      case StepKind::kRecip:
        v = 1.0 / v;
        break;
      case StepKind::kErf:
        v = std::erf(v);
        break;
      case StepKind::kHardSwish:
        v = v * std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
        break;
      case StepKind::kSwish:
        v = v * sigmoid(v);
        break;
      case StepKind::kGelu:
        v = 0.5 * v * (1.0 + std::erf(v * M_SQRT1_2));
        break;
      case StepKind::kClip:
        v = std::min(std::max(v, a(0)), a(1));
        break;
      case StepKind::kHardSigmoid:
        v = std::min(std::max(a(0) * v + a(1), 0.0), 1.0);
        break;
      case StepKind::kLeakyRelu:
        v = v < 0 ? a(0) * v : v;
        break;
      case StepKind::kMul:
        v *= a(0);
        break;
      case StepKind::kAdd:
        v += a(0);
        break;
      case StepKind::kDiv:
        v /= a(0);
        break;
      case StepKind::kRsub:
        v = a(0) - v;
        break;
      case StepKind::kRdiv:
        v = a(0) / v;
        break;
      case StepKind::kPow:
        v = std::pow(v, a(0));
        break;
      case StepKind::kMax:
        v = std::max(v, a(0));
        break;
      case StepKind::kMin:
        v = std::min(v, a(0));
        break;
    }
  }
  return v;
}

}  // namespace lathe::ir
