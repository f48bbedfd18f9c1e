// \file
// The CPU space's rule: Every workload: register tiles of columns (vectors) by rows, the inputs a
// tile walks along packed, the outer loops parallel. Last: the fallback the other rules come
// before. See rule.h for how rules run.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "tuner/cpu_rules/rule.h"

namespace lathe::tuner::internal {

namespace {

// A reduction this long (elements per output) into a tile of few vectors is bound by its
// chain of dependent adds; the rule then gives it up to kChainAccumulators independent ones.
constexpr int64_t kLongReduction = 64;
constexpr int64_t kChainAccumulators = 8;

// The elements a parallel task of a copy should move at least (16 KiB of floats): fewer, and
// the fused loop's index arithmetic and the task hand-out cost more than the copy.
constexpr int64_t kCopyTaskElements = 4096;

class RegisterTilesRule final : public CpuRule {
 public:
  const char* name() const override { return "register_tiles"; }
  bool Propose(RuleContext& c) const override;
};

bool RegisterTilesRule::Propose(RuleContext& c) const {
  const std::vector<int64_t>& shape = c.shape;
  const size_t n = c.n;
  const int lanes = c.lanes;
  // Rows narrower than a vector would run scalar here (plain NCHW conv 256 at 14x14: 34-61 ms
  // against 1.5-1.9 ms vectorized over the channels): leave them to the channels rule.
  if (c.chan_slot >= 0 && n >= 1 && shape[n - 1] < lanes) return false;
  const int acc_regs = c.acc_regs;
  struct Shape {
    int64_t cols, rows, third, unroll_k;
    bool pack;
  };
  // Wide rows first (two registers per row, as many rows as fit), then narrower variants.
  const int64_t c2 = 2 * lanes, c3 = 3 * lanes;
  std::vector<Shape> shapes = {
      {c2, acc_regs / 2, 1, 2, true},  {c3, acc_regs / 3, 1, 2, true},
      {c2, acc_regs / 2, 1, 4, true},  {c2, acc_regs / 4, 2, 2, true},
      {c2, acc_regs / 2, 1, 2, false}, {lanes, acc_regs / 2, 2, 2, true},
      {c3, acc_regs / 3, 1, 4, false}, {2 * c2, acc_regs / 4, 1, 2, true},
  };
  // Not for copies (transposes, elementwise ops: no reduction), whose first tile this made a
  // few elements on each of the outer axes and thousands of parallel tasks (PP-OCR det's
  // transpose 12x8x1600 -> 12x1600x8: 111-151 us, 42 us with one row of blocks per task).
  if (n >= 3 && !c.an.reduce_extents.empty()) {
    // Outputs with a channel axis before the rows (convolutions): the channels as the tile's
    // rows (one broadcast weight per channel), or a few of each.
    shapes.insert(shapes.begin() + 1, {c2, 1, acc_regs / 2, 2, true});
    shapes.insert(shapes.begin() + 3, {lanes, acc_regs / 4, 2, 4, true});
    // First: one vector of columns, two rows, the rest of the file in channels, the kernel's
    // columns unrolled (the best of every 300-trial tuning of conv 3x3/128/28x28 here: each
    // input vector serves every channel, each broadcast weight both rows).
    shapes.insert(shapes.begin(), {lanes, 2, acc_regs / 2, 4, false});
    // Unless the channels share no input (plain NCHW depthwise convolutions, poolings): then
    // rows, which share the window's input rows, and two channels for a second chain of
    // loads. Plain depthwise convolutions, us, first tile (2 ch x 4 rows x 16 columns / 14 ch x
    // 2 rows), Zen 4 AVX-512, 2 threads: 3x3 32 ch 112x112 62-78 / 103-110, 3x3/2 96 ch 112x112
    // 102-138 / 183-198, 5x5 240 ch 28x28 107-141 / 201-208, 5x5/2 144 ch 56x56 109-149 /
    // 169-171; 2 x 7 second (5x5 at 28x28: 99-115). Plain poolings alike (max 3x3/2 64 ch
    // 112x112: 57-75 / 91-199; avg 3x3 96 ch 56x56: 67-83 / 121-187).
    if (c.an.channels_private && n >= 4) {
      shapes.insert(shapes.begin(), {{lanes, 4, 2, 4, false}, {lanes, 7, 2, 4, false}});
    }
  }
  // The innermost reduce axis (a convolution's kernel columns): unrolled whole when short, so
  // that no unrolled copy runs guarded past its end (a 5x5 window unrolled by 4 runs a second,
  // mostly guarded copy: depthwise 5x5 NCHW, 240 channels at 28x28).
  const int64_t inner_reduce = c.an.reduce_extents.empty() ? 0 : c.an.reduce_extents.back();
  int64_t reduce = 1;  // elements reduced into each output
  for (int64_t e : c.an.reduce_extents) reduce *= e;
  // Plain depthwise convolutions over vectors of channels (CpuSpace::ApplyDepthwiseChannels):
  // each channel block's input copied with the channels innermost, the padding inlined into
  // the copy, the tile a blocked layout's (2 rows x 4 columns of channel vectors, each input
  // vector one load for every tap that reads it), the output written back transposed. The
  // copies cost about as much as a 3x3 window's multiply-adds: first for larger windows, second
  // otherwise. Zen 4 AVX-512, 2 threads, bench_built_kernel, us, columns rule / channels 2 x 4
  // / the blocked layout's rule: 5x5 240 ch 28x28 121-130 / 66 / 41, 5x5/2 144 ch 56x56 111-114
  // / 76-77 / 35-39, 3x3 32 ch 112x112 42-46 / 124 (1 x 4: 66) / 40-44, 3x3/2 96 ch 112x112
  // 90-99 / 136 (1 x 4: 97) / 58-66.
  const int64_t taps = c.an.reduce_extents.size() >= 2
                           ? c.an.reduce_extents.back() * c.an.reduce_extents.end()[-2]
                           : 0;
  // A plain grouped convolution (one or two vectors of channels a group) so first, one row of
  // 8 columns (4 on narrower rows, or where a group's two vectors would not fit 8 on 16
  // registers), a tail of columns allowed: its multiply-adds over the group's channels outweigh
  // the copies. RegNet's grouped 3x3s, us, channel vectors / the columns rule
  // / the blocked layout's kernel (Zen 4 AVX-512, 2 threads): 64 ch / 4 groups at 28x28 80 /
  // 291 / 76 (1 x 16: 78, 2 x 4: 171), 160 ch / 10 groups at 14x14 51 / 735-826 / 37.
  const bool grouped = c.an.group_out > 0;
  bool dw_pending = c.dw_chan_slot >= 0 && n == 4 && (grouped ? shape[3] >= 4 : shape[3] % 4 == 0);
  auto emit_dw = [&]() {
    dw_pending = false;
    std::vector<int64_t> d = c.Defaults();
    d[c.dw_chan_slot] = 1;
    for (int slot : c.pad_slot) d[slot] = c.Nearest(slot, 0);
    const int64_t group_vectors = grouped ? c.an.group_out / lanes : 1;
    const bool eight =
        grouped && shape[3] >= 8 && 8 * group_vectors <= c.target.vector_registers - 4;
    d[c.tile_slot[3]] = c.Nearest(c.tile_slot[3], eight ? 8 : 4);
    d[c.tile_slot[2]] = c.Nearest(c.tile_slot[2], taps > 9 && !grouped ? 2 : 1);
    c.Emit(std::move(d));
  };
  if (dw_pending && (taps > 9 || grouped)) emit_dw();
  for (const Shape& sh : shapes) {
    if (dw_pending && c.size() >= 1) emit_dw();
    if (c.Full()) break;
    std::vector<int64_t> d = c.Defaults();
    // Tiles: columns on the innermost axis, rows on the next, `third` on the one before.
    for (size_t a = 0; a < n; ++a) {
      int64_t want = 1;
      if (a + 1 == n) want = std::min(sh.cols, shape[a]);
      if (a + 2 == n) want = sh.rows;
      if (a + 3 == n) want = sh.third;
      // A tile that leaves a last tile mostly empty (32 channels in tiles of 14: three tiles,
      // the last with 4) becomes the largest divisor of the axis at least half as large.
      if (a + 3 == n && want > 1 && (shape[a] + want - 1) / want * want * 20 > shape[a] * 23) {
        for (int64_t t = want; 2 * t >= want; --t) {
          if (shape[a] % t == 0) {
            want = t;
            break;
          }
        }
      }
      // Rows outermost and parallel (row statistics: softmax, layer_norm) in few tiles: the
      // tile, down to half as large, that gives the busiest core the fewest rows. PP-OCR rec's
      // softmax 40x6625 in tiles of 6 rows ran 7 tasks on 2 cores (24 rows on one).
      if (a == 0 && n == 2 && !c.side_slot.empty() && want > 1 &&
          (shape[a] + want - 1) / want < 4 * c.target.cores) {
        auto busiest = [&](int64_t t) {
          const int64_t tiles = (shape[a] + t - 1) / t;
          return (tiles + c.target.cores - 1) / c.target.cores * t;
        };
        int64_t best = want;
        for (int64_t t = want - 1; 2 * t >= want; --t) {
          if (c.Nearest(c.tile_slot[a], t) == t && busiest(t) < busiest(best)) best = t;
        }
        want = best;
      }
      d[c.tile_slot[a]] = c.Nearest(c.tile_slot[a], want);
    }
    // A long reduction into a tile of one or two vectors (a global average pool over blocked
    // channels: [1, 12, 1, 1, 8] from 160x160 pixels) is one chain of dependent adds per
    // vector, bound by the add's latency: more accumulators from the outer axes the shape
    // leaves at 1 (channel blocks), as long as every core keeps two tasks. PP-OCR det's pool
    // over 96 channels at 160x160 on AVX2: one block a task 226 us, three blocks 77 us.
    if (n >= 4 && reduce >= kLongReduction) {
      int64_t vectors = 1;
      for (size_t a = 0; a < n; ++a) {
        const int64_t t = d[c.tile_slot[a]];
        vectors *= a + 1 == n ? std::max<int64_t>(1, t / lanes) : t;
      }
      // The axes outside the last three (rows, columns, the vector), innermost first.
      for (int a = static_cast<int>(n) - 4; a >= 0 && vectors <= 2; --a) {
        int64_t best = 1;
        for (int64_t t = 2; t * vectors <= kChainAccumulators && t <= shape[a]; ++t) {
          if (shape[a] % t == 0 && shape[a] / t >= 2 * c.target.cores) best = t;
        }
        if (best == 1) continue;
        d[c.tile_slot[a]] = c.Nearest(c.tile_slot[a], best);
        vectors *= d[c.tile_slot[a]];
      }
    }
    // Parallel: the fewest outer loops that give every core several iterations; with two
    // axes, the column tiles outermost so that a packed panel serves every row tile.
    // Row statistics (softmax, layer_norm): rows outermost, so that the statistics go per row
    // tile (c.Defaults()).
    const bool swap = n == 2 && c.side_slot.empty();
    std::vector<int64_t> outer(n);
    for (size_t a = 0; a < n; ++a)
      outer[a] = (shape[a] + d[c.tile_slot[a]] - 1) / d[c.tile_slot[a]];
    if (swap) std::swap(outer[n - 1], outer[n - 2]);
    int64_t fused = 1;
    size_t depth = 0;
    while (depth < n && fused < 4 * c.target.cores) fused *= outer[depth++];
    // The innermost tile loop fused in only where the others leave a core without a tile:
    // fused in, PP-OCR rec's slice 40x6640 -> 40x6625 ran as 2,905 tasks of 96 elements (630-670
    // us; 28 us as 10 row tiles), its softmax 40x6625 computed the row statistics apart from
    // the row tiles (873-915 us against 169-201; AVX2, 2 threads).
    if (depth == n && n >= 2 && fused / std::max<int64_t>(outer[n - 1], 1) >= c.target.cores) {
      depth = n - 1;
    }
    // Copies (no reduction: transposes, elementwise ops) whose parallel tasks move a few
    // vectors each: the innermost axis of the parallel loop in larger tiles (divisors), down
    // to 4 tasks a core, until a task moves kCopyTaskElements. PP-OCR det's re-blocking
    // transpose 6x2x25600x8 -> 6x25600x2x8 (nchw8c -> nchw16c, 96 channels at 160x160) ran
    // as 153,600 tasks of 16 elements: 3.9 ms in the model, 4.3-4.6 ms alone, 0.26 ms in
    // 2,400 tasks (Zen 4, 2 threads).
    // Two axes alike, their column tiles outermost: ShuffleNetV2's channel shuffle into
    // 8-channel blocks, transpose 2x45472 -> 45472x2, ran as 3,248 tasks of 28 elements (154
    // us; 14 us as 8 tasks, the same shuffle into 58-channel blocks).
    if (c.an.reduce_extents.empty() && n >= 2 && depth >= 1 && depth <= n) {
      int64_t total = 1;
      for (int64_t e : shape) total *= e;
      fused = 1;  // the parallel loop's tasks, as `depth` ended
      for (size_t i = 0; i < depth; ++i) fused *= outer[i];
      // The parallel loop's innermost and its axis (swapped: two axes, the columns' outer).
      const size_t pos = depth - 1;
      const size_t a = swap ? n - 1 - pos : pos;
      const int64_t others = fused / outer[pos];
      for (int64_t t = d[c.tile_slot[a]] + 1; t <= shape[a] && total / fused < kCopyTaskElements;
           ++t) {
        if (c.Nearest(c.tile_slot[a], t) != t || (shape[a] % t != 0 && t < shape[a])) continue;
        const int64_t tasks = others * ((shape[a] + t - 1) / t);
        if (tasks < 4 * c.target.cores) break;
        d[c.tile_slot[a]] = t;
        fused = tasks;
      }
    }
    d[c.parallel_slot] =
        c.Nearest(c.parallel_slot, static_cast<int64_t>(std::max<size_t>(depth, 1)));
    d[c.swap_slot] = c.Nearest(c.swap_slot, swap ? 1 : 0);
    d[c.vec_slot] = c.Nearest(c.vec_slot, 1);
    d[c.unroll_slot] = c.Nearest(c.unroll_slot, 1);
    d[c.unroll_k_slot] = c.Nearest(
        c.unroll_k_slot, inner_reduce > sh.unroll_k && inner_reduce <= 8 ? 8 : sh.unroll_k);
    for (size_t p = 0; p < c.pack_slot.size(); ++p) {
      d[c.pack_slot[p]] = c.Nearest(c.pack_slot[p], sh.pack && c.an.pack_walks_inner[p] ? 1 : 0);
    }
    c.Emit(std::move(d));
  }
  return false;
}

}  // namespace

std::unique_ptr<CpuRule> MakeRegisterTilesRule() { return std::make_unique<RegisterTilesRule>(); }

}  // namespace lathe::tuner::internal
