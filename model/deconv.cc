// Transposed convolutions whose windows do not overlap as 1x1 convolutions
// (model/kernels.h: ConvTransposesAsConvs).
//
// With stride == kernel, no padding, no output padding, no dilation and one group, every
// output pixel (i*r + a, j*s + b) of a ConvTranspose receives exactly one tap:
//   Y[n, o, i*r + a, j*s + b] = sum_c X[n, c, i, j] * W[c, o, a, b]  (+ per-channel steps)
// which is a 1x1 convolution with k*r*s output channels (channel o*r*s + a*s + b) followed by
// a depth-to-space transpose. The convolution is a dense, vectorizable matrix product that the
// layout pass blocks like any other; the direct conv2d_transpose gathers one tap per output
// pixel. PP-OCR det's 2x2 stride-2 24->24 ConvTranspose at 160x160 took 22 ms as a direct
// kernel (default schedule, AVX-512), the 24->1 one at 320x320 5.5 ms.
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/kernels.h"

namespace lathe::model {
namespace {

// The (r, s) of a transposed convolution that applies, else (0, 0).
std::pair<int64_t, int64_t> NonOverlapping(const Graph& g, const KernelDesc& k) {
  const auto& p = k.params;
  if (p.at("groups") != "1" || p.at("dilation") != "1x1" || p.at("pad") != "0x0x0x0" ||
      p.at("output_padding") != "0x0") {
    return {0, 0};
  }
  const int64_t r = std::stoll(p.at("r")), s = std::stoll(p.at("s"));
  if (p.at("stride") != absl::StrCat(r, "x", s) || r * s == 1 || !g.Const(k.inputs[1])) {
    return {0, 0};
  }
  // Per-channel tensor steps are widened to the new channels; a residual (a whole tensor in
  // the output's shape) would have to be read through the transpose: left direct.
  for (const auto& [kind, v] : k.step_inputs) {
    if (kind == ir::StepKind::kRes || !g.Const(v)) return {0, 0};
  }
  return {r, s};
}

// A 1x1 convolution (one group, stride 1, no padding) with constant weights and constant
// per-channel steps only.
bool IsPointwiseConv(const Graph& g, const KernelDesc& k) {
  const auto& p = k.params;
  if (k.op != "conv2d" || p.at("r") != "1" || p.at("s") != "1" || p.at("groups") != "1" ||
      p.at("stride") != "1x1" || p.at("pad") != "0x0x0x0" || !g.Const(k.inputs[1])) {
    return false;
  }
  for (const auto& [kind, v] : k.step_inputs) {
    if (kind == ir::StepKind::kRes || !g.Const(v)) return false;
  }
  return true;
}

// The most multiply-adds per element of the depth-to-space transpose that CommuteDepthToSpace
// may add: a 1x1 conv to k2 channels after a transpose of r*s sub-pixels costs k2*(r*s - 1)
// more per element moved when it runs before it.
constexpr int64_t kMaxCommuteWork = 16;

}  // namespace

// A 1x1 convolution (k -> k2 channels) that reads only a depth-to-space transpose of X
// [n, k*rs, h, w] runs on X before it instead, as a 1x1 convolution k*rs -> k2*rs whose
// weights are W on each sub-pixel's channels (block diagonal) and zero across them:
//   conv(d2s(X))[o, i*r + a, j*s + b] = sum_c W[o, c] X[c*rs + a*s + b, i, j]
//                                     = d2s(conv'(X))  with conv' = W (x) I_rs.
// The transpose then moves k2*rs channels instead of k*rs. PP-OCR det's head (ConvTranspose
// 24->24, BN, ReLU, ConvTranspose 24->1, both 2x2 stride 2) moved 24 channels at 320x320
// (9.8 MB) between its two convolutions; it moves 4 at 320x320 after this.
void CommuteDepthToSpace(Graph& g, Lowered& l) {
  // A rewrite leaves the counts of the values that stay as they were: the conv reads X
  // instead of the transpose, the new transpose writes what the conv wrote.
  std::map<std::string, int> readers = ReaderCounts(g, l);
  for (size_t ti = 0; ti < l.kernels.size(); ++ti) {
    const KernelDesc& t = l.kernels[ti];
    if (t.op != "transpose") continue;
    const Value* xv = g.Find(t.inputs[0]);
    const Value* yv = g.Find(t.output);
    if (!xv || !yv || xv->shape.size() != 4 || yv->shape.size() != 4 || readers[t.output] != 1) {
      continue;
    }
    size_t ci = ti + 1;
    for (; ci < l.kernels.size(); ++ci) {
      if (!l.kernels[ci].inputs.empty() && l.kernels[ci].inputs[0] == t.output) break;
    }
    if (ci == l.kernels.size() || !IsPointwiseConv(g, l.kernels[ci])) continue;
    KernelDesc& c = l.kernels[ci];
    const int64_t n = xv->shape[0], krs = xv->shape[1], h = xv->shape[2], w = xv->shape[3];
    const int64_t k = yv->shape[1];
    if (k <= 0 || krs % k != 0 || yv->shape[2] % h != 0 || yv->shape[3] % w != 0) continue;
    const int64_t rs = krs / k, r = yv->shape[2] / h, s = yv->shape[3] / w;
    const int64_t k2 = std::stoll(c.params.at("k"));
    if (r * s != rs || k2 * (rs - 1) > kMaxCommuteWork) continue;
    // The transpose must be a depth-to-space (ConvTransposesAsConvs's): channel c*rs + a*s + b.
    const KernelDesc expect =
        TransposeKernel({n, k, r, s, h, w}, {0, 1, 4, 2, 5, 3}, t.inputs[0], t.output, "");
    if (expect.params != t.params) continue;
    // Weights [k2][k][1][1] -> [k2*rs][k*rs][1][1], block diagonal.
    const ConstData& wd = *g.Const(c.inputs[1]);
    ConstData wide;
    wide.f.assign(static_cast<size_t>(k2 * rs * krs), 0.0f);
    for (int64_t o = 0; o < k2; ++o) {
      for (int64_t cc = 0; cc < k; ++cc) {
        const float v = static_cast<float>(wd.at(o * k + cc));
        for (int64_t sub = 0; sub < rs; ++sub) wide.f[(o * rs + sub) * krs + cc * rs + sub] = v;
      }
    }
    const std::string out = c.output;
    KernelDesc conv = c;
    conv.inputs[0] = t.inputs[0];
    conv.inputs[1] = g.AddConst(c.inputs[1] + "@d2s", {k2 * rs, krs, 1, 1}, std::move(wide));
    conv.params["c"] = std::to_string(krs);
    conv.params["k"] = std::to_string(k2 * rs);
    conv.params["h"] = std::to_string(h);
    conv.params["w"] = std::to_string(w);
    for (auto& [kind, v] : conv.step_inputs) {
      const ConstData& vd = *g.Const(v);
      ConstData per;
      per.f.resize(static_cast<size_t>(k2 * rs));
      for (int64_t o = 0; o < k2 * rs; ++o) per.f[o] = static_cast<float>(vd.at(o / rs));
      v = g.AddConst(v + "@d2s", {k2 * rs}, std::move(per));
    }
    Value mid;
    mid.name = out + "@s2d";
    mid.shape = {n, k2 * rs, h, w};
    g.values[mid.name] = mid;
    conv.output = mid.name;
    KernelDesc moved = TransposeKernel(
        {n, k2, r, s, h, w}, {0, 1, 4, 2, 5, 3}, mid.name, out,
        absl::StrCat(absl::StrJoin(t.nodes, ", "), " (after ", absl::StrJoin(c.nodes, ", "), ")"));
    c = std::move(conv);
    l.kernels.insert(l.kernels.begin() + static_cast<std::ptrdiff_t>(ci) + 1, std::move(moved));
    l.kernels.erase(l.kernels.begin() + static_cast<std::ptrdiff_t>(ti));
    --ti;
  }
}

void ConvTransposesAsConvs(Graph& g, Lowered& l) {
  std::vector<KernelDesc> out;
  for (KernelDesc& k : l.kernels) {
    const auto [r, s] =
        k.op == "conv2d_transpose" ? NonOverlapping(g, k) : std::pair<int64_t, int64_t>{0, 0};
    if (r == 0) {
      out.push_back(std::move(k));
      continue;
    }
    const int64_t n = std::stoll(k.params.at("n")), c = std::stoll(k.params.at("c"));
    const int64_t h = std::stoll(k.params.at("h")), w = std::stoll(k.params.at("w"));
    const int64_t kk = std::stoll(k.params.at("k")), rs = r * s;
    // Weights [c][k][r][s] -> [k*r*s][c][1][1].
    const ConstData& wd = *g.Const(k.inputs[1]);
    ConstData wt;
    wt.f.resize(wd.size());
    for (int64_t ci = 0; ci < c; ++ci) {
      for (int64_t o = 0; o < kk * rs; ++o) {
        wt.f[o * c + ci] = static_cast<float>(wd.at(ci * kk * rs + o));
      }
    }
    KernelDesc conv = k;
    conv.op = "conv2d";
    conv.params = {{"n", std::to_string(n)},
                   {"c", std::to_string(c)},
                   {"h", std::to_string(h)},
                   {"w", std::to_string(w)},
                   {"k", std::to_string(kk * rs)},
                   {"r", "1"},
                   {"s", "1"},
                   {"groups", "1"},
                   {"stride", "1x1"},
                   {"pad", "0x0x0x0"},
                   {"dilation", "1x1"}};
    conv.inputs[1] = g.AddConst(k.inputs[1] + "@1x1", {kk * rs, c, 1, 1}, std::move(wt));
    for (auto& [kind, v] : conv.step_inputs) {
      const ConstData& vd = *g.Const(v);
      ConstData wide;
      wide.f.resize(kk * rs);
      for (int64_t o = 0; o < kk * rs; ++o) wide.f[o] = static_cast<float>(vd.at(o / rs));
      v = g.AddConst(v + "@x" + std::to_string(rs), {kk * rs}, std::move(wide));
    }
    Value mid;
    mid.name = k.output + "@s2d";
    mid.shape = {n, kk * rs, h, w};
    g.values[mid.name] = mid;
    conv.output = mid.name;
    // [n][k][r][s][h][w] -> [n][k][h][r][w][s]: the output [n][k][h*r][w*s].
    out.push_back(TransposeKernel({n, kk, r, s, h, w}, {0, 1, 4, 2, 5, 3}, mid.name, k.output,
                                  "depth to space of " + absl::StrJoin(k.nodes, ", ")));
    out.insert(out.end() - 1, std::move(conv));
  }
  l.kernels = std::move(out);
  CommuteDepthToSpace(g, l);
}

}  // namespace lathe::model
