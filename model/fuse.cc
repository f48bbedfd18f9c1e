// Activation patterns and epilogue fusion over the lowered kernels (model/kernels.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/kernels.h"

namespace lathe::model {
namespace {

using ir::EpilogueExpr;
using ir::EpilogueStep;
using ir::StepKind;

bool Near(float a, double b) { return std::fabs(a - b) <= 1e-5 * std::max(1.0, std::fabs(b)); }

bool IsUnaryEwise(const KernelDesc& k) { return k.op == "ewise" && k.inputs.size() == 1; }

// The activation that x * f(x) spells, as steps, when f's steps are one of the known forms.
std::optional<std::vector<EpilogueStep>> SelfProduct(const EpilogueExpr& f) {
  const auto& s = f.steps;
  if (s.size() == 1 && s[0].kind == StepKind::kSigmoid) {
    return std::vector<EpilogueStep>{{StepKind::kSwish, {}}};
  }
  if (s.size() == 1 && s[0].kind == StepKind::kHardSigmoid && Near(s[0].args[0], 1.0 / 6) &&
      Near(s[0].args[1], 0.5)) {
    return std::vector<EpilogueStep>{{StepKind::kHardSwish, {}}};
  }
  // x * clip(x + 3, 0, 6): 6 * hswish(x).
  if (s.size() == 2 && s[0].kind == StepKind::kAdd && Near(s[0].args[0], 3) &&
      s[1].kind == StepKind::kClip && Near(s[1].args[0], 0) && Near(s[1].args[1], 6)) {
    return std::vector<EpilogueStep>{{StepKind::kHardSwish, {}}, {StepKind::kMul, {6.0f}}};
  }
  // x * (1 + erf(x / sqrt 2)): 2 * gelu(x).
  if (s.size() == 3 && s[1].kind == StepKind::kErf && s[2].kind == StepKind::kAdd &&
      Near(s[2].args[0], 1) &&
      ((s[0].kind == StepKind::kDiv && Near(s[0].args[0], M_SQRT2)) ||
       (s[0].kind == StepKind::kMul && Near(s[0].args[0], M_SQRT1_2)))) {
    return std::vector<EpilogueStep>{{StepKind::kGelu, {}}, {StepKind::kMul, {2.0f}}};
  }
  return std::nullopt;
}

// Rewrites Mul(x, f(x)) into a unary kernel of x; returns whether anything changed.
bool FuseSelfProducts(const Graph& g, Lowered& l) {
  std::map<std::string, int> readers = ReaderCounts(g, l);
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < l.kernels.size(); ++i) producer[l.kernels[i].output] = i;
  for (size_t i = 0; i < l.kernels.size(); ++i) {
    KernelDesc& c = l.kernels[i];
    if (c.op != "ewise" || c.inputs.size() != 2 || c.params["binary"] != "mul" ||
        c.params["a"] != c.params["b"]) {
      continue;
    }
    for (int side = 0; side < 2; ++side) {
      const std::string& x = c.inputs[side];
      const std::string& t = c.inputs[1 - side];
      auto it = producer.find(t);
      if (it == producer.end() || readers[t] != 1) continue;
      const KernelDesc& f = l.kernels[it->second];
      if (!IsUnaryEwise(f) || f.inputs[0] != x || !f.step_inputs.empty()) continue;
      std::optional<std::vector<EpilogueStep>> steps = SelfProduct(f.epilogue);
      if (!steps) continue;
      KernelDesc merged = c;
      merged.inputs = {x};
      merged.params.erase("b");
      merged.params.erase("binary");
      std::vector<EpilogueStep> all = *steps;
      all.insert(all.end(), c.epilogue.steps.begin(), c.epilogue.steps.end());
      merged.epilogue.steps = all;
      merged.nodes.insert(merged.nodes.begin(), f.nodes.begin(), f.nodes.end());
      const size_t fi = it->second;
      l.kernels[i] = std::move(merged);
      l.kernels.erase(l.kernels.begin() + static_cast<std::ptrdiff_t>(fi));
      return true;
    }
  }
  return false;
}

// Where the constant of shape `cs` broadcast against `out` varies only along `axis`.
bool ChannelOnly(const std::vector<int64_t>& cs, const std::vector<int64_t>& out, int axis) {
  if (cs.size() > out.size()) return false;
  const size_t off = out.size() - cs.size();
  for (size_t d = 0; d < cs.size(); ++d) {
    if (cs[d] != 1 && static_cast<int>(off + d) != axis) return false;
    if (cs[d] != 1 && cs[d] != out[off + d]) return false;
  }
  return NumElements(cs) == out[axis];
}

// The steps that fold consumer `c` (which reads producer p's output as input `side`) into
// p's epilogue, or nullopt; new constants go into g.
std::optional<std::pair<std::vector<EpilogueStep>, std::map<StepKind, std::string>>> AsSteps(
    Graph& g, const KernelDesc& p, const KernelDesc& c, int side) {
  std::vector<EpilogueStep> steps;
  std::map<StepKind, std::string> tensors;
  const std::vector<int64_t>& out = g.Find(p.output)->shape;
  if (c.inputs.size() == 1) {
    if (!c.step_inputs.empty() && c.channel_axis(g) != p.channel_axis(g)) return std::nullopt;
    steps = c.epilogue.steps;
    tensors = c.step_inputs;
    return std::make_pair(steps, tensors);
  }
  const std::string bin = c.params.at("binary");
  const std::string& other = c.inputs[1 - side];
  const std::vector<int64_t>& os = g.Find(other)->shape;
  const ConstData* cd = g.Const(other);
  const int axis = p.channel_axis(g);
  if (cd && NumElements(os) == 1) {
    const float v = static_cast<float>(cd->at(0));
    if (bin == "add") steps.push_back({StepKind::kAdd, {v}});
    if (bin == "mul") steps.push_back({StepKind::kMul, {v}});
    if (bin == "max") steps.push_back({StepKind::kMax, {v}});
    if (bin == "min") steps.push_back({StepKind::kMin, {v}});
    if (bin == "sub")
      steps.push_back(side == 0 ? EpilogueStep{StepKind::kAdd, {-v}}
                                : EpilogueStep{StepKind::kRsub, {v}});
    if (bin == "div")
      steps.push_back(side == 0 ? EpilogueStep{StepKind::kDiv, {v}}
                                : EpilogueStep{StepKind::kRdiv, {v}});
    if (bin == "pow" && side == 0) steps.push_back({StepKind::kPow, {v}});
    if (steps.empty()) return std::nullopt;
  } else if (cd && ChannelOnly(os, out, axis) &&
             (bin == "add" || bin == "mul" || (side == 0 && (bin == "sub" || bin == "div")))) {
    ConstData flat = *cd;
    if (bin == "sub") {
      for (float& v : flat.f) v = -v;
    }
    if (bin == "div") {
      for (float& v : flat.f) v = 1.0f / v;
    }
    const StepKind kind = bin == "add" || bin == "sub" ? StepKind::kBias : StepKind::kScale;
    const int64_t n = flat.size();
    steps.push_back({kind, {}});
    tensors[kind] =
        g.AddConst(other + (kind == StepKind::kBias ? ".bias" : ".scale"), {n}, std::move(flat));
  } else if (bin == "add" && NumElements(os) == NumElements(out) && os.size() <= out.size()) {
    // Same elements (a constant or another tensor of the output's shape): a residual add.
    bool same = true;
    const size_t off = out.size() - os.size();
    for (size_t d = 0; d < off; ++d) same = same && out[d] == 1;
    for (size_t d = 0; d < os.size(); ++d) same = same && os[d] == out[off + d];
    if (!same) return std::nullopt;
    steps.push_back({StepKind::kRes, {}});
    tensors[StepKind::kRes] = other;
  } else {
    return std::nullopt;
  }
  steps.insert(steps.end(), c.epilogue.steps.begin(), c.epilogue.steps.end());
  for (const auto& [k, v] : c.step_inputs) {
    if (k != StepKind::kRes && c.channel_axis(g) != axis) return std::nullopt;
    if (tensors.count(k)) return std::nullopt;
    tensors[k] = v;
  }
  return std::make_pair(steps, tensors);
}

// Folds one elementwise consumer into its producer; returns whether anything changed.
bool FuseOneEpilogue(Graph& g, Lowered& l) {
  std::map<std::string, int> readers = ReaderCounts(g, l);
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < l.kernels.size(); ++i) producer[l.kernels[i].output] = i;
  for (size_t i = 0; i < l.kernels.size(); ++i) {
    const KernelDesc& c = l.kernels[i];
    if (c.op != "ewise" || c.params.count("upsample") != 0) continue;
    for (int side = 0; side < static_cast<int>(c.inputs.size()); ++side) {
      const std::string& x = c.inputs[side];
      auto it = producer.find(x);
      if (it == producer.end() || readers[x] != 1) continue;
      const KernelDesc& p = l.kernels[it->second];
      if (!p.has_epilogue()) continue;
      if (g.Find(c.output)->shape.size() != g.Find(x)->shape.size() ||
          NumElements(g.Find(c.output)->shape) != NumElements(g.Find(x)->shape)) {
        continue;
      }
      auto steps = AsSteps(g, p, c, side);
      if (!steps) continue;
      bool clash = false;
      for (const auto& [k, v] : steps->second) clash = clash || p.step_inputs.count(k);
      KernelDesc merged = p;
      if (clash) {
        // e.g. a BatchNorm's scale and shift after a bias: folded into the weights together.
        std::vector<EpilogueStep> all = p.epilogue.steps;
        std::vector<std::string> tensors = StepTensors(p);
        for (const EpilogueStep& s : steps->first) {
          all.push_back(s);
          tensors.push_back(ir::IsTensorStep(s.kind) ? steps->second.at(s.kind) : "");
        }
        if (!FoldLinearSteps(g, merged, all, tensors)) continue;
      } else {
        merged.epilogue.steps.insert(merged.epilogue.steps.end(), steps->first.begin(),
                                     steps->first.end());
        for (const auto& [k, v] : steps->second) merged.step_inputs[k] = v;
      }
      merged.output = c.output;
      merged.nodes.insert(merged.nodes.end(), c.nodes.begin(), c.nodes.end());
      const size_t pi = it->second;
      l.kernels[i] = std::move(merged);  // at the consumer's place: every input exists there
      l.kernels.erase(l.kernels.begin() + static_cast<std::ptrdiff_t>(pi));
      return true;
    }
  }
  return false;
}

// The factors of a nearest-neighbour resize that reads source pixel o / f at output pixel o
// (integer factors f >= 1 of both spatial dimensions), else nullopt. ONNX's nearest resize
// reads floor(o / f) with asymmetric coordinates and floor rounding; with half-pixel ones
// (o + 0.5) / f - 0.5 lies strictly within 0.5 of floor(o / f) for f >= 2 (exactly on it for
// f == 1), so both round-to-nearest modes read it too.
std::optional<std::pair<int64_t, int64_t>> IntegerNearestFactors(const KernelDesc& r) {
  const auto& p = r.params;
  if (p.at("mode") != "nearest") return std::nullopt;
  const std::string& coord = p.at("coord");
  const std::string& nearest = p.at("nearest");
  const bool floor_read = (coord == "asymmetric" && nearest == "floor") ||
                          ((coord == "half_pixel" || coord == "pytorch_half_pixel") &&
                           (nearest == "round_prefer_floor" || nearest == "round_prefer_ceil"));
  const int64_t h = std::stoll(p.at("h")), w = std::stoll(p.at("w"));
  const int64_t oh = std::stoll(p.at("oh")), ow = std::stoll(p.at("ow"));
  if (!floor_read || h <= 0 || w <= 0 || oh % h != 0 || ow % w != 0 || (oh == h && ow == w)) {
    return std::nullopt;
  }
  return std::make_pair(oh / h, ow / w);
}

// The add `l.kernels[ci]` of a full-size map and the resize `l.kernels[ri]` (nearest, by
// `factors` on H and W) of a coarser one, where the full-size map comes from an elementwise
// kernel read by nothing else (a feature pyramid's lateral branch, e.g. PP-OCR det's
// x * se(x) + x): the add becomes that kernel's resup epilogue step, reading the coarse map
// in place, so the full-size map is not written and read back. Removes the resize and the
// add; false (nothing changed) where the pattern does not hold.
bool FoldUpsampledAdd(Graph& g, Lowered& l, const std::map<std::string, int>& readers, size_t ri,
                      size_t ci, std::pair<int64_t, int64_t> factors) {
  const KernelDesc& r = l.kernels[ri];
  const KernelDesc& c = l.kernels[ci];
  if (c.params.at("binary") != "add" || !c.epilogue.empty()) return false;
  const std::string& other = c.inputs[0] == r.output ? c.inputs[1] : c.inputs[0];
  const std::string& coarse = r.inputs[0];
  size_t pi = l.kernels.size(), coarse_at = l.kernels.size();
  for (size_t k = 0; k < l.kernels.size(); ++k) {
    if (l.kernels[k].output == other) pi = k;
    if (l.kernels[k].output == coarse) coarse_at = k;
  }
  if (pi == l.kernels.size() || pi > ci || coarse_at == pi) return false;
  auto n = readers.find(other);
  const KernelDesc& p = l.kernels[pi];
  if (p.op != "ewise" || n == readers.end() || n->second != 1 || p.epilogue.Has(StepKind::kResUp) ||
      g.Find(other)->shape.size() != 4) {
    return false;
  }
  // The folded kernel runs where the add ran: its own inputs are older, the coarse map (read
  // by the resize before the add) exists by then, and nothing else read its output.
  KernelDesc folded = p;
  folded.epilogue.Then(StepKind::kResUp,
                       {static_cast<float>(factors.first), static_cast<float>(factors.second)});
  folded.step_inputs[StepKind::kResUp] = coarse;
  folded.output = c.output;
  folded.nodes.insert(folded.nodes.end(), r.nodes.begin(), r.nodes.end());
  folded.nodes.insert(folded.nodes.end(), c.nodes.begin(), c.nodes.end());
  l.kernels[ci] = std::move(folded);
  l.kernels.erase(l.kernels.begin() + static_cast<std::ptrdiff_t>(std::max(pi, ri)));
  l.kernels.erase(l.kernels.begin() + static_cast<std::ptrdiff_t>(std::min(pi, ri)));
  return true;
}

// A nearest-neighbour resize by integer factors whose one reader is a binary elementwise
// kernel is read in place by it (ewise's upsample key: b read at index / factor) instead of
// written out at full size and read back. PP-OCR det's FPN adds an upsampled coarser map to
// each finer one (96 channels, 20->40, 40->80, 80->160): the last resize wrote 9.8 MB that
// the add read back. Where the finer map's producer is itself elementwise, the add goes into
// it instead (FoldUpsampledAdd).
// A fusion leaves every other count as it was (the resize's input is read by the ewise instead).
void FuseResizes(Graph& g, Lowered& l) {
  std::map<std::string, int> readers = ReaderCounts(g, l);
  for (size_t i = 0; i < l.kernels.size(); ++i) {
    const KernelDesc& r = l.kernels[i];
    if (r.op != "resize" || readers[r.output] != 1) continue;
    const auto factors = IntegerNearestFactors(r);
    if (!factors) continue;
    size_t ci = i + 1;
    for (; ci < l.kernels.size(); ++ci) {
      const auto& in = l.kernels[ci].inputs;
      if (std::find(in.begin(), in.end(), r.output) != in.end()) break;
    }
    if (ci == l.kernels.size()) continue;
    KernelDesc& c = l.kernels[ci];
    if (c.op != "ewise" || c.inputs.size() != 2 || c.params.count("upsample") != 0 ||
        c.inputs[0] == c.inputs[1]) {
      continue;
    }
    const std::string& bin = c.params.at("binary");
    const bool commutes = bin == "add" || bin == "mul" || bin == "max" || bin == "min";
    const int side = c.inputs[0] == r.output ? 0 : 1;
    if (side == 0 && !commutes) continue;
    const std::string other = c.inputs[1 - side];
    const std::vector<int64_t>& full = g.Find(r.output)->shape;
    if (g.Find(other)->shape != full || g.Find(c.output)->shape != full) continue;
    if (FoldUpsampledAdd(g, l, readers, i, ci, *factors)) {
      // Two kernels before the add are gone: scan again from the start.
      readers = ReaderCounts(g, l);
      i = static_cast<size_t>(-1);
      continue;
    }
    c.inputs = {other, r.inputs[0]};
    c.params["a"] = absl::StrJoin(full, "x");
    c.params["b"] = absl::StrJoin(g.Find(r.inputs[0])->shape, "x");
    c.params["upsample"] = absl::StrCat("1x1x", factors->first, "x", factors->second);
    c.nodes.insert(c.nodes.begin(), r.nodes.begin(), r.nodes.end());
    l.kernels.erase(l.kernels.begin() + static_cast<std::ptrdiff_t>(i));
    --i;
  }
}

// Folds runs of constant multiplications (mul, div) and of constant additions into one step,
// and drops the ones that cancel (hard-swish's "* 6 / 6", GELU's "* 2 * 0.5").
void SimplifyConstants(EpilogueExpr& e) {
  std::vector<EpilogueStep> out;
  for (const EpilogueStep& s : e.steps) {
    const bool mul = s.kind == StepKind::kMul || s.kind == StepKind::kDiv;
    const double factor = s.kind == StepKind::kMul   ? s.args[0]
                          : s.kind == StepKind::kDiv ? 1.0 / s.args[0]
                                                     : 1.0;
    if (mul && !out.empty() && out.back().kind == StepKind::kMul) {
      out.back().args[0] = static_cast<float>(out.back().args[0] * factor);
    } else if (mul) {
      out.push_back({StepKind::kMul, {static_cast<float>(factor)}});
    } else if (s.kind == StepKind::kAdd && !out.empty() && out.back().kind == StepKind::kAdd) {
      out.back().args[0] += s.args[0];
    } else {
      out.push_back(s);
    }
    if (!out.empty() && ((out.back().kind == StepKind::kMul && Near(out.back().args[0], 1.0)) ||
                         (out.back().kind == StepKind::kAdd && out.back().args[0] == 0.0f))) {
      out.pop_back();
    }
  }
  // A single division stays one (x / 6 is exact where x * (1/6) is not).
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].kind != StepKind::kMul) continue;
    const double inv = 1.0 / out[i].args[0];
    if (std::fabs(inv - std::round(inv)) < 1e-6 && std::fabs(inv) >= 2) {
      out[i] = {StepKind::kDiv, {static_cast<float>(std::round(inv))}};
    }
  }
  e.steps = std::move(out);
}

}  // namespace

int KernelDesc::channel_axis(const Graph& g) const {
  const size_t rank = g.Find(output)->shape.size();
  if (op == "matmul" || op == "batch_matmul") return static_cast<int>(rank) - 1;
  return rank >= 2 ? 1 : 0;
}

std::string KernelDesc::SpecText() const {
  std::vector<std::string> parts;
  for (const auto& [k, v] : params) parts.push_back(k + "=" + v);
  if (has_epilogue()) parts.push_back("epilogue=" + epilogue.ToString());
  return op + ":" + absl::StrJoin(parts, ",");
}

// A value read through an alias counts for the alias's storage root.
std::map<std::string, int> ReaderCounts(const Graph& g, const Lowered& l) {
  std::map<std::string, int> r;
  auto base = [&](std::string v) {
    for (auto it = l.aliases.find(v); it != l.aliases.end(); it = l.aliases.find(v)) {
      r[v] += 0;
      v = it->second.base;
    }
    return v;
  };
  for (const KernelDesc& k : l.kernels) {
    for (const std::string& in : k.inputs) ++r[base(in)];
    for (const auto& [kind, v] : k.step_inputs) ++r[base(v)];
  }
  for (const std::string& o : g.outputs) r[base(o)] += 2;
  return r;
}

void FuseKernels(Graph& g, Lowered& l) {
  for (bool changed = true; changed;) {
    changed = FuseSelfProducts(g, l) || FuseOneEpilogue(g, l);
  }
  FuseResizes(g, l);
  for (KernelDesc& k : l.kernels) SimplifyConstants(k.epilogue);
}

}  // namespace lathe::model
