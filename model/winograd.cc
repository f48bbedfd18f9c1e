// 3x3 convolutions as Winograd F(m x m, 3 x 3) (model/kernels.h: WinogradConvs).
//
// A dense 3x3 stride-1 convolution in the blocked layout becomes three kernels
// (ir/ops_winograd.cc): winograd_in (the input's (m+2)^2-position tiles transformed), a
// batch_matmul over the (m+2)^2 positions of (tiles x input channels) by the weights
// transformed here once, in column panels (bpanel), and winograd_out (transformed back, the
// convolution's epilogue applied). F(4x4, 3x3) multiplies 36 times per tile and channel pair
// where the direct convolution multiplies 144 times; the transforms are memory-bound passes
// over the input and output.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ir/ops.h"
#include "ir/workload.h"
#include "model/kernels.h"

namespace lathe::model {
namespace {

// The output tile for a convolution, or 0 where Winograd does not apply or does not pay: a
// dense 3x3 stride-1 undilated convolution in a blocked layout, output extents a multiple of
// the tile, enough channels on both sides that the matrix products dominate the transforms,
// and transformed weights small enough to stay in the caches.
int64_t TileFor(const ir::Conv2dParams& p) {
  if (!p.blocked() || p.plain_input || p.kblock != p.cblock || p.groups != 1 || p.r != 3 ||
      p.s != 3 || p.stride_h != 1 || p.stride_w != 1 || p.dilation_h != 1 || p.dilation_w != 1) {
    return 0;
  }
  if (p.c < kWinogradMinChannels || p.k < kWinogradMinChannels) return 0;
  for (int64_t m : {4, 2}) {
    const int64_t t = m + 2;
    const int64_t weight_bytes = t * t * p.c * p.k * static_cast<int64_t>(sizeof(float));
    if (p.oh() % m == 0 && p.ow() % m == 0 && weight_bytes <= kWinogradMaxWeightBytes) return m;
  }
  return 0;
}

}  // namespace

void WinogradConvs(Graph& g, Lowered& l, int64_t panel) {
  std::vector<KernelDesc> out;
  for (KernelDesc& k : l.kernels) {
    absl::StatusOr<ir::Workload> w =
        k.op == "conv2d" ? ir::MakeWorkload(k.SpecText()) : absl::StatusOr<ir::Workload>();
    absl::StatusOr<ir::Conv2dParams> p =
        w.ok() ? ir::GetConv2dParams(w->spec) : absl::StatusOr<ir::Conv2dParams>(w.status());
    const int64_t m = p.ok() && g.Const(k.inputs[1]) ? TileFor(*p) : 0;
    if (m == 0) {
      out.push_back(std::move(k));
      continue;
    }
    const int64_t t = m + 2, b = p->cblock, c = p->c, kk = p->k;
    const int64_t tiles = p->n * (p->oh() / m) * (p->ow() / m);
    // Panels of `panel` output channels, halved until they divide them.
    int64_t pn = panel > 1 ? panel : b;
    while (pn > 1 && kk % pn != 0) pn /= 2;
    // The blocked weights [K/b][C/b][3][3][b][b] transformed and packed.
    const ConstData& wd = *g.Const(k.inputs[1]);
    ConstData u;
    u.f = ir::WinogradWeights(
        [&](int64_t oc, int64_t ic, int64_t ry, int64_t rx) {
          return wd.at((((((oc / b) * (c / b) + ic / b) * 3 + ry) * 3 + rx) * b + ic % b) * b +
                       oc % b);
        },
        kk, c, m, pn);
    const std::string weights = g.AddConst(absl::StrCat(k.inputs[1], "@winograd", m),
                                           {t * t, kk / pn, c, pn}, std::move(u));
    const std::string layout = k.params.at("layout");
    auto value = [&](const std::string& suffix, int64_t channels) {
      const std::string name = absl::StrCat(k.output, suffix);
      Value v;
      v.name = name;
      v.shape = {t * t, tiles, channels};
      g.values[name] = v;
      return name;
    };

    KernelDesc in;
    in.op = "winograd_in";
    in.params = {{"n", std::to_string(p->n)},
                 {"c", std::to_string(c)},
                 {"h", std::to_string(p->h)},
                 {"w", std::to_string(p->w)},
                 {"m", std::to_string(m)},
                 {"layout", layout},
                 {"pad", absl::StrCat(p->pad_t, "x", p->pad_l, "x", p->pad_b, "x", p->pad_r)}};
    in.inputs = {k.inputs[0]};
    in.output = value("@winograd_in", c);
    in.nodes = k.nodes;

    KernelDesc mm;
    mm.op = "batch_matmul";
    mm.params = {{"b", std::to_string(t * t)},
                 {"m", std::to_string(tiles)},
                 {"n", std::to_string(kk)},
                 {"k", std::to_string(c)},
                 {"bpanel", std::to_string(pn)}};
    mm.inputs = {in.output, weights};
    mm.output = value("@winograd_mm", kk);
    mm.nodes = k.nodes;

    KernelDesc o;
    o.op = "winograd_out";
    o.params = {{"n", std::to_string(p->n)},     {"k", std::to_string(kk)},
                {"oh", std::to_string(p->oh())}, {"ow", std::to_string(p->ow())},
                {"m", std::to_string(m)},        {"layout", layout}};
    o.epilogue = std::move(k.epilogue);
    o.step_inputs = std::move(k.step_inputs);
    o.inputs = {mm.output};
    o.output = k.output;
    o.nodes = k.nodes;

    out.push_back(std::move(in));
    out.push_back(std::move(mm));
    out.push_back(std::move(o));
  }
  l.kernels = std::move(out);
}

}  // namespace lathe::model
