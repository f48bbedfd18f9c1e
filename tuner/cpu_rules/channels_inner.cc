// \file
// The CPU space's rule: NCHW convolutions vectorized over their output channels
// (CpuSpace::ApplyChannelsInner). See rule.h for how rules run.
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
    const int64_t chan_shapes[][3] = {{2, 1, 4}, {4, 1, 2}, {2, 2, 2}, {1, 2, 4}};
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
