// \file
// The CPU space's rule: Matmuls whose B comes in column panels (bpanel): a panel's columns by as
// many rows as the accumulators allow. See rule.h for how rules run.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "ir/ops.h"
#include "tuner/cpu_rules/rule.h"

namespace lathe::tuner::internal {

namespace {

// The most rows of A a panel tile reads at once where A streams from L3 (see Propose).
constexpr int64_t kMaxStreamedRows = 8;

class PanelMatmulRule final : public CpuRule {
 public:
  const char* name() const override { return "panel_matmul"; }
  bool Propose(RuleContext& c) const override;
};

bool PanelMatmulRule::Propose(RuleContext& c) const {
  const std::vector<int64_t>& shape = c.shape;
  const size_t n = c.n;
  const int acc_regs = c.acc_regs;
  // Matmuls with B in column panels (i, panel, column): a whole panel's columns x as many rows
  // as the accumulators allow, one panel per tile, nothing packed (B is contiguous per k
  // already, and A's row is a broadcast). BERT's FFN1 (128x3072x768, bias+GELU, panels of 16)
  // on Zen 3 (AVX2, 2 threads): 6 x 16 took 4.3-4.9 ms (k unrolled by 4: 4.3, by 2: 4.7) where
  // the same tile over row-major B, which must copy each panel on every call, took 5.7-6.6 ms.
  if (c.an.panel_matmul && (n == 3 || n == 4)) {
    const size_t o = n - 3;  // a batch axis first: one batch per tile
    const int64_t vecs = c.VectorsFor(shape[o + 2]);
    // Every panel's task reads all of A (the panels are the parallel loop). Where A does not
    // stay in the L2 cache it comes from L3 for each panel, and a tile of many rows reads as
    // many rows of A at once: at most kMaxStreamedRows then. A (m x k, row-major) of 1-1.5 MB,
    // 128 or 384 rows in tiles of 14 / 8 / 6 rows x 2 zmm, us: BERT's FFN2 (k = 3072) 3400-3600
    // / 2750-2820 / 2750-2840, k = 2048 2280-2630 / 1800-1890 / 1780-1940, m = 384 k = 1024
    // 3350-3470 / 2660-2690 / 2680-2710; with A in L2 the rows made no difference (k = 768:
    // 650-690 each; k = 1536, 768 KB: 1350-1470 / 1310-1390). Zen 4 AVX-512, 2 threads.
    absl::StatusOr<ir::MatmulParams> mp = ir::GetMatmulParams(c.workload.spec);
    int64_t rows = acc_regs / vecs;
    if (mp.ok() && !mp->transpose_a && mp->m * mp->k * 4 > kMaxTileWeightBytes) {
      rows = std::min(rows, kMaxStreamedRows);
    }
    const int64_t panel_shapes[][3] = {// rows, panels, unroll_k
                                       {rows, 1, 4},
                                       {rows, 1, 2},
                                       {acc_regs / (2 * vecs), 2, 2},
                                       {std::max<int64_t>(1, rows - 2), 1, 2}};
    for (const auto& ps : panel_shapes) {
      if (c.Full()) break;
      std::vector<int64_t> d = c.Defaults();
      if (o == 1) d[c.tile_slot[0]] = c.Nearest(c.tile_slot[0], 1);
      d[c.tile_slot[o]] = c.Nearest(c.tile_slot[o], std::max<int64_t>(1, ps[0]));
      d[c.tile_slot[o + 1]] = c.Nearest(c.tile_slot[o + 1], ps[1]);
      d[c.tile_slot[o + 2]] = c.Nearest(c.tile_slot[o + 2], shape[o + 2]);
      // The (batches and) panels (ApplyTiles: outermost).
      d[c.parallel_slot] = c.Nearest(c.parallel_slot, static_cast<int64_t>(o + 1));
      d[c.vec_slot] = c.Nearest(c.vec_slot, 1);
      d[c.unroll_slot] = c.Nearest(c.unroll_slot, 1);
      d[c.unroll_k_slot] = c.Nearest(c.unroll_k_slot, ps[2]);
      for (int slot : c.pack_slot) d[slot] = c.Nearest(slot, 0);
      c.Emit(std::move(d));
    }
  }
  return false;
}

}  // namespace

std::unique_ptr<CpuRule> MakePanelMatmulRule() { return std::make_unique<PanelMatmulRule>(); }

}  // namespace lathe::tuner::internal
