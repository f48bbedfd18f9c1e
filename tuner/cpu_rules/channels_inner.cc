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
  if (c.chan_slot >= 0) {
    const size_t ca = static_cast<size_t>(c.an.chan_axis);
    // A 1x1 convolution is a GEMM over the pixels: a wider tile, 4 channel vectors x 7 columns
    // (28 accumulators, 11 loads per 28 FMAs), comes first (plain NCHW 1x1 256->256 at 14x14:
    // 178 us against 254 for 2 x 4; 64->256 at 56x56: 1241 against 1335; two threads,
    // AVX-512); windows keep the 2 x 4 tile first (conv 3x3 64: 1311 us against 2801).
    std::vector<std::array<int64_t, 3>> chan_shapes = {{2, 1, 4}, {4, 1, 2}, {2, 2, 2},
                                                       {1, 2, 4}, {4, 1, 7}, {2, 1, 14}};
    int64_t window = 1;
    for (size_t i = 1; i < c.an.reduce_extents.size(); ++i) window *= c.an.reduce_extents[i];
    if (window == 1) std::rotate(chan_shapes.begin(), chan_shapes.begin() + 4, chan_shapes.end());
    for (const auto& cs : chan_shapes) {
      if (c.Full()) break;
      std::vector<int64_t> d = c.Defaults();
      for (size_t a = 0; a < n; ++a) {
        int64_t want = 1;
        if (a == ca) want = cs[0] * lanes;
        if (a + 1 == n) want = cs[2];
        if (a + 2 == n && a != ca) want = cs[1];
        d[c.tile_slot[a]] = c.Nearest(c.tile_slot[a], want);
      }
      d[c.parallel_slot] = c.Nearest(c.parallel_slot, static_cast<int64_t>(ca + 1));
      d[c.unroll_slot] = c.Nearest(c.unroll_slot, 1);
      d[c.unroll_k_slot] = c.Nearest(c.unroll_k_slot, 2);
      d[c.chan_slot] = 1;
      c.Emit(std::move(d));
    }
  }
  return false;
}

}  // namespace

std::unique_ptr<CpuRule> MakeChannelsInnerRule() { return std::make_unique<ChannelsInnerRule>(); }

}  // namespace lathe::tuner::internal
