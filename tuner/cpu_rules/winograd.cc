// \file
// The CPU space's rule: Winograd transforms (winograd_in, winograd_out): the positions whole and
// unrolled. Exclusive: no other rule applies to a transform. See rule.h for how rules run.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "tuner/cpu_rules/rule.h"

namespace lathe::tuner::internal {

namespace {

class WinogradRule final : public CpuRule {
 public:
  const char* name() const override { return "winograd"; }
  bool Propose(RuleContext& c) const override;
};

bool WinogradRule::Propose(RuleContext& c) const {
  const std::vector<int64_t>& shape = c.shape;
  const size_t n = c.n;
  // Winograd transforms: the positions whole and unrolled, the channel block as the vector
  // and the padding computed once at root (their slots allow nothing else), one or two
  // blocks per tile; parallel over the outer loops until every core has several iterations.
  if (!c.an.unrolled_axes.empty()) {
    const size_t chan = c.workload.spec.op == "winograd_in" ? n - 2 : 1;
    for (const int64_t blocks : {1, 2}) {
      if (c.Full()) break;
      std::vector<int64_t> d = c.Defaults();
      // (The positions' slots hold only their whole extent: Nearest picks it.)
      for (size_t a = 0; a + 1 < n; ++a) d[c.tile_slot[a]] = c.Nearest(c.tile_slot[a], 1);
      d[c.tile_slot[chan]] = c.Nearest(c.tile_slot[chan], blocks);
      d[c.tile_slot[n - 1]] = c.Nearest(c.tile_slot[n - 1], shape[n - 1]);
      int64_t fused = 1;
      size_t depth = 0;
      while (depth < n - 1 && fused < 4 * c.target.cores) {
        fused *= (shape[depth] + d[c.tile_slot[depth]] - 1) / d[c.tile_slot[depth]];
        ++depth;
      }
      d[c.parallel_slot] =
          c.Nearest(c.parallel_slot, static_cast<int64_t>(std::max<size_t>(depth, 1)));
      d[c.vec_slot] = c.Nearest(c.vec_slot, 1);
      for (int slot : c.pad_slot) d[slot] = c.Nearest(slot, 1);
      c.Emit(std::move(d));
    }
    return true;
  }
  return false;
}

}  // namespace

std::unique_ptr<CpuRule> MakeWinogradRule() { return std::make_unique<WinogradRule>(); }

}  // namespace lathe::tuner::internal
