// \file
// The CPU space's rule: NCHW convolutions vectorized over their output channels
// (CpuSpace::ApplyChannelsInner). See rule.h for how rules run.
#include <algorithm>
#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "tuner/cpu_rules/rule.h"

namespace lathe::tuner::internal {

namespace {

class ChannelsInnerRule final : public CpuRule {
 public:
  const char* name() const override { return "channels_inner"; }
  bool Propose(RuleContext& c) const override;
};

bool ChannelsInnerRule::Propose(RuleContext& c) const {
  const size_t n = c.n;
  const int lanes = c.lanes;
  // Vectorized over the channels (NCHW convolutions): (channel vectors, rows, columns) of
  // accumulators, the kernel's columns unrolled, parallel over the channel tiles.
  // Where rows are a vector wide or more (the register tiles rule vectorizes them), only
  // channel tiles of whole vectors that divide the channels: with a tail tile PP-OCR det's 1x1
  // 192->42 at 40x40 took 2.4-4.6 ms (1x1 192->40: 4.5 ms in tiles of 16 or 32, 0.39-0.46 in
  // tiles of 8), pixel vectors 0.27 (AVX2, 2 threads). Without a whole vector of channels the
  // other rules' tiles come first. Narrower rows keep the tail (dilated 5x3 32->40, 15 columns,
  // 16 lanes: 177 us).
  const int64_t channels = c.chan_slot >= 0 ? c.shape[static_cast<size_t>(c.an.chan_axis)] : 0;
  const bool whole = n >= 1 && c.shape[n - 1] >= lanes;
  auto whole_vectors = [&](int64_t vecs) {
    while (whole && vecs > 1 && channels % (vecs * lanes) != 0) --vecs;
    return vecs;
  };
  if (c.chan_slot >= 0 && (!whole || channels % lanes == 0)) {
    const size_t ca = static_cast<size_t>(c.an.chan_axis);
    // A 1x1 convolution is a GEMM over the pixels: a wider tile, 4 channel vectors x 7 columns
    // (28 accumulators, 11 loads per 28 FMAs), comes first (plain NCHW 1x1 256->256 at 14x14:
    // 178 us against 254 for 2 x 4; 64->256 at 56x56: 1241 against 1335; two threads,
    // AVX-512); windows keep the 2 x 4 tile first (conv 3x3 64: 1311 us against 2801).
    // (channel vectors, rows, columns, channels mode, padding inlined).
    std::vector<std::array<int64_t, 5>> chan_shapes = {{2, 1, 4, 1, 0}, {4, 1, 2, 1, 0},
                                                       {2, 2, 2, 1, 0}, {1, 2, 4, 1, 0},
                                                       {4, 1, 7, 1, 0}, {2, 1, 14, 1, 0}};
    int64_t window = 1;
    for (size_t i = 1; i < c.an.reduce_extents.size(); ++i) window *= c.an.reduce_extents[i];
    if (window == 1) {
      std::rotate(chan_shapes.begin(), chan_shapes.begin() + 4, chan_shapes.end());
      // First on 32 registers where 8 columns divide the row: two channel vectors x 8 columns,
      // whose output tile is written as transposed tiles (CpuSpace::ApplyChannelsInner; plain
      // 1x1 64->256 + bias + relu at 56x56: 500-542 us against 618-637 for 4 x 7).
      const int64_t width = n >= 1 ? c.shape[n - 1] : 0;
      if (c.target.vector_registers >= 32 && width % 8 == 0 && channels % (2 * lanes) == 0) {
        chan_shapes.insert(chan_shapes.begin(), {2, 1, 8, 1, 0});
      }
    }
    // Windows over enough input channels: first the blocked layout's register tile, the input
    // channels unrolled innermost instead of the window's columns (mode 2; see
    // CpuSpace::ApplyChannelsInner): channel vectors up to four (two with 16 registers), fewer
    // where the channel tiles would not give every core one; then the columns that fill the
    // rest of the register file: a divisor of the row within one below that, else one above
    // (one accumulator spilled: conv 3x3 128->128 at 28x28, AVX-512, 4 x 7 1040-1150 us where
    // 4 x 6 with a tail took 1140-1450), else that with a tail.
    const int64_t in_channels = c.an.reduce_extents.empty() ? 0 : c.an.reduce_extents[0];
    if (window > 1 && in_channels > kChanUnroll && in_channels % kChanUnroll == 0) {
      const int regs = c.target.vector_registers;
      int64_t vecs =
          std::clamp<int64_t>(c.VectorsFor(c.shape[ca]) / c.target.cores, 1, regs >= 32 ? 4 : 2);
      // The channel tile's packed weights stay in L2 across the pixel tiles (conv 3x3
      // 512->512 at 7x7: 4 vectors, 1.2 MB, 2906 us; the 2 x 4 tile 2256).
      while (vecs > 1 && in_channels * window * vecs * lanes * 4 > kMaxTileWeightBytes) --vecs;
      vecs = whole_vectors(vecs);
      const int64_t fit =
          std::max<int64_t>(1, std::min((regs - vecs - 1) / vecs, (regs - 4) / vecs));
      const int64_t width = c.shape[n - 1];
      int64_t cols = std::min(fit, width);
      // Rows narrower than the tile: several of them (7x7 maps: 2 x 7).
      const int64_t rows = ca + 2 < n ? std::max<int64_t>(1, fit / cols) : 1;
      if (width > fit) {
        for (int64_t t : {fit, fit - 1, fit + 1}) {
          if (t >= 1 && width % t == 0 && t * vecs <= regs - 4) {
            cols = t;
            break;
          }
        }
      }
      // First on 32 registers; second on 16, where the 2 x 6 tile lost to 2 x 4 with the
      // columns unrolled (AVX2 code on the AVX-512 host, us: conv 3x3 128->128 at 28x28 1709 /
      // 1540, 512->512 at 7x7 3327 / 2359; dilated 169 / 187).
      chan_shapes.insert(chan_shapes.begin() + (regs >= 32 ? 0 : 1),
                         {vecs, cols < width ? 1 : rows, cols, 2, 0});
      // First on 32 registers: two channel vectors x one row of 5-8 columns (a divisor of the
      // row where there is one), the window's columns unrolled innermost (mode 1) and the
      // padding inlined, so that the padding's taps drop out of the code
      // (codegen/zero_taps.h) and no copy of the input is made. Plain 3x3 convs, us (Zen 4
      // AVX-512, 2 threads, weights packed as transposed tiles): 64ch 56x56 998-1087 against
      // the tile above's 1070-1298, 128ch 28x28 972-995 / 1165-1177, 256ch 14x14 962-970 /
      // 1158-1210, 512ch 7x7 1205-1222 / 1438-1549. (Two vectors x 14 columns so: 1850-2020
      // at 56x56; four vectors x 7: 1600-1900.)
      if (regs >= 32 && c.shape[ca] % (2 * lanes) == 0 &&
          UnrollsWindowLoop(2 * 7, c.an.reduce_extents.back())) {
        int64_t row_cols = std::min<int64_t>(7, width);
        for (int64_t t = std::min<int64_t>(8, width); t >= 5; --t) {
          if (width % t == 0) {
            row_cols = t;
            break;
          }
        }
        chan_shapes.insert(chan_shapes.begin(), {2, 1, row_cols, 1, 1});
      }
    }
    for (const auto& cs : chan_shapes) {
      if (c.Full()) break;
      std::vector<int64_t> d = c.Defaults();
      for (size_t a = 0; a < n; ++a) {
        int64_t want = 1;
        if (a == ca) want = whole_vectors(cs[0]) * lanes;
        if (a + 1 == n) want = cs[2];
        if (a + 2 == n && a != ca) want = cs[1];
        d[c.tile_slot[a]] = c.Nearest(c.tile_slot[a], want);
      }
      d[c.parallel_slot] = c.Nearest(c.parallel_slot, static_cast<int64_t>(ca + 1));
      d[c.unroll_slot] = c.Nearest(c.unroll_slot, 1);
      d[c.unroll_k_slot] = c.Nearest(c.unroll_k_slot, 2);
      d[c.chan_slot] = c.Nearest(c.chan_slot, cs[3]);
      if (cs[4] != 0) {
        for (int slot : c.pad_slot) d[slot] = c.Nearest(slot, 0);
      }
      c.Emit(std::move(d));
    }
  }
  return false;
}

}  // namespace

std::unique_ptr<CpuRule> MakeChannelsInnerRule() { return std::make_unique<ChannelsInnerRule>(); }

}  // namespace lathe::tuner::internal
