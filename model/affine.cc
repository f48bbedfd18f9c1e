// Affine steps of epilogues as weights and parameter tensors (model/kernels.h): the per-node
// constants that would otherwise make every convolution a workload of its own.
//
// The linear steps that open the epilogue of a kernel with constant weights (bias, scale, mul,
// div, add, neg: v -> a[ch] * v + c[ch]) are folded into the weights (scaled by a per output
// channel) and one bias (c): "bias_mul2.15_add-0.55_hswish..." becomes "bias_hswish...". The
// constant multiplications and additions that close an epilogue after its last nonlinear step
// become per-channel parameter tensors (scale, shift): "...hswish_mul0.53_add0.17" becomes
// "...hswish_scale_shift". PP-OCR's "learnable affine" blocks spell exactly these, so that
// convolutions of one shape share one workload and one tuned schedule.
#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/kernels.h"

namespace lathe::model {
namespace {

using ir::EpilogueStep;
using ir::StepKind;

bool IsLinear(StepKind k) {
  return k == StepKind::kBias || k == StepKind::kScale || k == StepKind::kShift ||
         k == StepKind::kMul || k == StepKind::kDiv || k == StepKind::kAdd || k == StepKind::kNeg;
}

// The number of output channels of `k` and, for weight element e, its output channel; or 0
// when the kernel's weights cannot take a per-channel factor.
struct WeightChannels {
  int64_t channels = 0;
  std::vector<int64_t> of;  // output channel of every weight element
};

WeightChannels ChannelsOf(const Graph& g, const KernelDesc& k) {
  WeightChannels wc;
  if (k.inputs.size() < 2 || !g.Const(k.inputs[1])) return wc;
  const std::vector<int64_t>& ws = g.Find(k.inputs[1])->shape;
  const int64_t n = NumElements(ws);
  wc.of.resize(n);
  if (k.op == "conv2d" && ws.size() == 4 && !k.params.count("layout")) {
    wc.channels = ws[0];
    const int64_t per = n / ws[0];
    for (int64_t e = 0; e < n; ++e) wc.of[e] = e / per;
  } else if (k.op == "conv2d_transpose" && ws.size() == 4) {
    // W[C, K/g, r, s]: input channel ic feeds output channels (ic / (C/g)) * K/g + j.
    const int64_t groups = std::stoll(k.params.at("groups"));
    const int64_t c = ws[0], kpg = ws[1], rs = ws[2] * ws[3];
    wc.channels = kpg * groups;
    for (int64_t e = 0; e < n; ++e) {
      const int64_t ic = e / (kpg * rs), j = (e / rs) % kpg;
      wc.of[e] = (ic / (c / groups)) * kpg + j;
    }
  } else if (k.op == "matmul" && !k.params.count("transpose_b") && ws.size() == 2) {
    wc.channels = ws[1];
    for (int64_t e = 0; e < n; ++e) wc.of[e] = e % ws[1];
  } else {
    wc.of.clear();
  }
  return wc;
}

std::string Vector(Graph& g, const std::string& hint, std::vector<float> v) {
  ConstData d;
  const int64_t n = static_cast<int64_t>(v.size());
  d.f = std::move(v);
  return g.AddConst(hint, {n}, std::move(d));
}

}  // namespace

bool FoldLinearSteps(Graph& g, KernelDesc& k, const std::vector<EpilogueStep>& steps,
                     const std::vector<std::string>& tensors) {
  const WeightChannels wc = ChannelsOf(g, k);
  if (wc.channels == 0) return false;
  const int64_t ch = wc.channels;
  std::vector<double> a(ch, 1.0), c(ch, 0.0);
  size_t i = 0;
  bool had_bias = false;
  for (; i < steps.size() && IsLinear(steps[i].kind); ++i) {
    const EpilogueStep& s = steps[i];
    const ConstData* t = ir::IsTensorStep(s.kind) ? g.Const(tensors[i]) : nullptr;
    if (ir::IsTensorStep(s.kind) && (!t || t->size() != ch)) break;
    for (int64_t j = 0; j < ch; ++j) {
      switch (s.kind) {
        case StepKind::kBias:
        case StepKind::kShift:
          c[j] += t->at(j);
          break;
        case StepKind::kScale:
          a[j] *= t->at(j);
          c[j] *= t->at(j);
          break;
        case StepKind::kMul:
          a[j] *= s.args[0];
          c[j] *= s.args[0];
          break;
        case StepKind::kDiv:
          a[j] /= s.args[0];
          c[j] /= s.args[0];
          break;
        case StepKind::kAdd:
          c[j] += s.args[0];
          break;
        case StepKind::kNeg:
          a[j] = -a[j];
          c[j] = -c[j];
          break;
        default:
          break;
      }
    }
    had_bias = had_bias || s.kind == StepKind::kBias || s.kind == StepKind::kShift ||
               s.kind == StepKind::kAdd;
  }
  // The rest must not repeat a tensor step (a bias opens it now).
  std::vector<EpilogueStep> rest(steps.begin() + static_cast<std::ptrdiff_t>(i), steps.end());
  std::vector<std::string> rest_tensors(tensors.begin() + static_cast<std::ptrdiff_t>(i),
                                        tensors.end());
  std::map<StepKind, std::string> step_inputs;
  for (size_t r = 0; r < rest.size(); ++r) {
    if (!ir::IsTensorStep(rest[r].kind)) continue;
    if (rest[r].kind == StepKind::kBias && had_bias) return false;
    if (step_inputs.count(rest[r].kind)) return false;
    step_inputs[rest[r].kind] = rest_tensors[r];
  }
  if (i == 0 || (i == 1 && steps[0].kind == StepKind::kBias)) {  // nothing to fold
    if (i == 1) {
      rest.insert(rest.begin(), steps[0]);
      step_inputs[StepKind::kBias] = tensors[0];
    }
    k.epilogue.steps = rest;
    k.step_inputs = std::move(step_inputs);
    return true;
  }
  if (std::any_of(a.begin(), a.end(), [](double v) { return v != 1.0; })) {
    ConstData w = *g.Const(k.inputs[1]);
    ConstData scaled;
    scaled.f.resize(w.size());
    for (int64_t e = 0; e < w.size(); ++e) scaled.f[e] = static_cast<float>(w.at(e) * a[wc.of[e]]);
    k.inputs[1] =
        g.AddConst(k.inputs[1] + ".folded", g.Find(k.inputs[1])->shape, std::move(scaled));
  }
  std::vector<EpilogueStep> all;
  if (had_bias) {
    all.push_back({StepKind::kBias, {}});
    step_inputs[StepKind::kBias] =
        Vector(g, k.output + ".bias", std::vector<float>(c.begin(), c.end()));
  }
  all.insert(all.end(), rest.begin(), rest.end());
  k.epilogue.steps = std::move(all);
  k.step_inputs = std::move(step_inputs);
  return true;
}

std::vector<std::string> StepTensors(const KernelDesc& k) {
  std::vector<std::string> t;
  for (const EpilogueStep& s : k.epilogue.steps) {
    t.push_back(ir::IsTensorStep(s.kind) ? k.step_inputs.at(s.kind) : "");
  }
  return t;
}

void ParameterizeConstants(Graph& g, Lowered& l) {
  for (KernelDesc& k : l.kernels) {
    if (!k.has_epilogue() || k.epilogue.empty()) continue;
    FoldLinearSteps(g, k, k.epilogue.steps, StepTensors(k));
    const WeightChannels wc = ChannelsOf(g, k);
    if (wc.channels == 0) continue;
    // The closing run of constant mul/div/add after the last nonlinear step.
    std::vector<EpilogueStep>& steps = k.epilogue.steps;
    size_t first = steps.size();
    while (first > 0) {
      const StepKind kind = steps[first - 1].kind;
      if (kind != StepKind::kMul && kind != StepKind::kDiv && kind != StepKind::kAdd) break;
      --first;
    }
    if (first == steps.size() || first == 0) continue;  // none, or a linear epilogue
    if (k.step_inputs.count(StepKind::kScale) || k.step_inputs.count(StepKind::kShift)) continue;
    double a = 1, c = 0;
    for (size_t i = first; i < steps.size(); ++i) {
      const double v = steps[i].args[0];
      if (steps[i].kind == StepKind::kAdd) {
        c += v;
      } else {
        const double f = steps[i].kind == StepKind::kMul ? v : 1.0 / v;
        a *= f;
        c *= f;
      }
    }
    steps.resize(first);
    if (a != 1.0) {
      steps.push_back({StepKind::kScale, {}});
      k.step_inputs[StepKind::kScale] =
          Vector(g, k.output + ".scale", std::vector<float>(wc.channels, static_cast<float>(a)));
    }
    if (c != 0.0) {
      steps.push_back({StepKind::kShift, {}});
      k.step_inputs[StepKind::kShift] =
          Vector(g, k.output + ".shift", std::vector<float>(wc.channels, static_cast<float>(c)));
    }
  }
}

}  // namespace lathe::model
