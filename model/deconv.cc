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

}  // namespace

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
}

}  // namespace lathe::model
