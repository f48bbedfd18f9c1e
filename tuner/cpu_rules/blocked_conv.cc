// \file
// The CPU space's rule: Convolutions in a blocked layout (nchw{x}c): register tiles of (channel
// blocks, rows, columns) with the block as the vector, and the chunked tiles of dense ones. See
// rule.h for how rules run.
#include <algorithm>
#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "ir/ops.h"
#include "tuner/cpu_rules/rule.h"

namespace lathe::tuner::internal {

namespace {

// The accumulators of the first tile of a dense convolution whose output block is half a vector
// (see Propose).
constexpr int64_t kHalfBlockAccumulators = 16;

// The vector tile of an output block of `block` lanes: the whole block, unless it is wider than
// the vector and not a multiple of it (the layout pass's one block of 18 or 42 channels on
// AVX-512): then one vector (a masked last one). LLVM legalizes a vector of 18 or 42 floats into
// pieces and scalar lanes: PP-OCR det's 1x1 96->18 at 80x80 743-749 us as x18, 392-430 as x16
// with a 2-lane tail; 1x1 192->42 at 40x40 864-999 us as x42, 246 as x16 (Zen 4 AVX-512, 2
// threads). A block narrower than the vector stays whole (1x1 48->12 at 160x160: 192-227 us as
// x12, 187-195 as x16, 520-870 as 8 + 4). Not for a single output pixel (squeeze-excitation
// 1x1s on a pooled map): one call of a few vectors, which the split made 2-4x slower (0.3 ->
// 1.0 us).
int64_t BlockVectorTile(int64_t block, int lanes, int64_t pixels) {
  return block > lanes && block % lanes != 0 && pixels > 1 ? lanes : block;
}

class BlockedConvRule final : public CpuRule {
 public:
  const char* name() const override { return "blocked_conv"; }
  bool Propose(RuleContext& c) const override;
};

bool BlockedConvRule::Propose(RuleContext& c) const {
  const std::vector<int64_t>& shape = c.shape;
  const size_t n = c.n;
  const int lanes = c.lanes;
  const int acc_regs = c.acc_regs;
  // Blocked convolutions: the output channel block is the vector; (channel blocks, rows,
  // columns) of accumulators fill the register file (less a weight vector or two and a
  // broadcast), columns first: each broadcast input pixel serves every channel block, each
  // weight vector every pixel of the tile. Parallel over the outer loops; weights already
  // blocked, nothing packed; the kernel's channel lanes unrolled by 4.
  if (c.an.blocked_conv && n == 5) {
    const int64_t ow = shape[3];
    const int64_t kv_tile = BlockVectorTile(shape[4], lanes, shape[2] * ow);
    // (channel blocks, rows, columns), the columns the most that fit (divisors of ow first).
    const int64_t acc = acc_regs;
    auto cols_for = [&](int64_t per_col) { return c.ColumnsFor(ow, per_col); };
    // The largest divisor of the row in [lo, hi], 0 where there is none.
    auto largest_divisor = [&](int64_t lo, int64_t hi) {
      int64_t best = 0;
      for (int64_t d = std::max<int64_t>(lo, 1); d <= std::min(hi, ow); ++d) {
        if (ow % d == 0) best = d;
      }
      return best;
    };
    std::vector<std::array<int64_t, 3>> blocked_shapes = {{1, 1, c.FirstTileColumns(ow)},
                                                          {1, 2, cols_for(2)},
                                                          {2, 1, cols_for(2)},
                                                          {1, 2, cols_for(4)},
                                                          {2, 2, cols_for(4)}};
    absl::StatusOr<ir::Conv2dParams> params = BlockedConvParams(c.workload.spec);
    const int64_t taps = params.ok() ? params->r * params->s : 1;
    // The output blocks that read the same input: every block of a dense conv, a group's of a
    // grouped one (RegNet's 3x3s, 16 channels a group: one block on AVX-512). A tile's blocks
    // share each broadcast input only within a group: RegNetX's grouped 3x3 160ch/10 at 14x14
    // took 95 us as 5 blocks (of 5 groups) x 4 columns, 37 as one block x 14 (AVX-512, Zen 4,
    // 2 threads; oneDNN 38).
    const bool grouped = params.ok() && params->groups > 1 && !params->depthwise();
    const int64_t shared_blocks =
        grouped ? std::max<int64_t>(1, params->k / params->groups / shape[4]) : shape[1];

    // 32 registers, a dense conv with whole-vector blocks and at least 4 of them: 4 channel
    // blocks x up to 6 columns (24 accumulators; or 5 x 4, 3 x 8, 6 x 4) first, as oneDNN's kernels
    // tile: per input channel and tap 4 weight vectors and 6 broadcasts feed 24 FMAs, where one
    // block x 14 columns loads 15 operands for 14 FMAs. AVX-512, 2 threads: conv 1x1/256/14x14 4 x
    // 6 115-138 us, 4 x 7 151-179, 1 x 14 190-198 (oneDNN 87); conv 3x3/128/28x28 4 x 4 1165 us, 1
    // x 14 1410-2059; 3x3/256/14x14 4 x 6 (a tail on 14 columns) 912 us, chunked 3088.
    if (c.target.vector_registers >= 32 && params.ok() && !params->depthwise() &&
        shape[4] == lanes && shared_blocks >= 4) {
      // The channel blocks a tile takes divide the output's (4, else 5, 3 or 6): a tail tile
      // of blocks costs more than the shape gains (conv 1x1 240->240 at 12x80, 15 blocks: 4 x
      // 5 with a tail 550-701 us, 5 x 4 402-538, 3 x 5 407-491).
      int64_t blocks = grouped ? 1 : 4;
      for (int64_t b : {4, 5, 3, 6}) {
        if (shared_blocks % b == 0) {
          blocks = b;
          break;
        }
      }
      // Fewer blocks where their weights would not stay in the L2 cache while the pixel tiles
      // pass over them: conv 3x3/512/7x7 (4 blocks read 1.2 MB of weights per pass, 14
      // passes) took 2.8-4.5 ms as 4 x 6, 1.3-1.5 ms as 2 x 7 (0.6 MB), 2.0-2.2 ms as 1 x 7
      // (AVX-512, 2 threads; oneDNN 1.1 ms).
      const int64_t block_weight_bytes = lanes * (params->c / params->groups) * taps * 4;
      while (blocks > 1 && blocks * block_weight_bytes > kMaxTileWeightBytes) {
        int64_t fewer = blocks - 1;
        while (fewer > 1 && shape[1] % fewer != 0) --fewer;
        blocks = fewer;
      }
      // Columns: a divisor of the row within one of the most that fit; else the most, where
      // their tail wastes at most a tenth of the row; else half the blocks with twice the
      // columns where a divisor allows; else the largest divisor unless it is thin. AVX-512,
      // 2 threads, page-aligned buffers (bench_built_kernel, us): 7 columns 3x3/512 2 x 7 1306
      // vs 4 x 6 2760; 14 columns 1x1/256 2 x 7 123, 4 x 5 140, 4 x 6 149 and 3x3/256 2 x 7 957,
      // 4 x 6 1001, 4 x 5 1047; 28 columns 3x3/128 4 x 6 815, 4 x 4 895, 2 x 7 1019; 56 columns
      // 3x3/64 4 x 6 866, 2 x 8 956, 4 x 4 978, 2 x 7 1054.
      const int64_t max_cols = std::min<int64_t>(24 / blocks, ow);
      const int64_t tail_cols = (ow + max_cols - 1) / max_cols * max_cols - ow;
      int64_t cols = largest_divisor(max_cols - 1, max_cols);
      if (cols == 0 && 10 * tail_cols <= ow) cols = max_cols;
      if (cols == 0 && blocks % 2 == 0) {
        const int64_t wide = largest_divisor(max_cols + 1, 24 / (blocks / 2));
        if (wide > 0) {
          blocks /= 2;
          cols = wide;
        }
      }
      if (cols == 0) {
        cols = largest_divisor(1, max_cols);
        if (3 * cols < 2 * max_cols) cols = max_cols;  // a tail beats a thin tile
      }
      blocked_shapes.insert(blocked_shapes.begin(), {blocks, 1, cols});
    }
    // 32 registers, a dense conv whose output block is half a vector (k = 24, 40 or 360 in
    // blocks of 8 on AVX-512: one half-width register a block): 3 blocks (else 4 or 2, where
    // they divide the blocks: a tail tile of blocks costs more) by the columns of about 16
    // accumulators first (a divisor of the row within one, else that).
    // Each broadcast input then feeds every block, where the tile of one block x 10 columns
    // loaded 11 operands for 10 multiply-adds. Zen 4 AVX-512, 2 threads, us, 3 x 5 / 1 x 10
    // (the first tile before) / 3 x 8: PP-OCR det's 3x3 96->24 at 160x160 5190-5270 /
    // 6000-6830 / 5830-7570, at 80x80 1268-1280 / 1479 / 1438-1952; 1x1 384->360 at 20x20 517 /
    // 563 (5 x 4: 527, 5 x 3: 544).
    // Where none of them divides the blocks (a prime count: ShuffleNetV2's 232 channels, 29
    // blocks), one block x rows of columns, about as many accumulators: a divisor of the row up
    // to 16 columns, then the rows that fill it (1x1 232->232 at 7x7, us: 1 x 2 x 7 36.6, the
    // 1 x 1 x 7 first before 56.8; at 14x14 1 x 1 x 14 212, 1 x 2 x 14 261, 2 x 1 x 7 with a
    // tail block 305; Zen 4 AVX-512, 2 threads).
    if (c.target.vector_registers >= 32 && params.ok() && !params->depthwise() &&
        2 * shape[4] == lanes) {
      bool placed = false;
      for (int64_t blocks : {3, 4, 2}) {
        if (shared_blocks % blocks != 0) continue;
        const int64_t want = std::min<int64_t>(kHalfBlockAccumulators / blocks, ow);
        const int64_t divisor = largest_divisor(want - 1, want);
        blocked_shapes.insert(blocked_shapes.begin(), {blocks, 1, divisor > 0 ? divisor : want});
        placed = true;
        break;
      }
      if (!placed && shape[2] * ow > 1) {
        const int64_t most = std::min<int64_t>(kHalfBlockAccumulators, ow);
        const int64_t divisor = largest_divisor(4, most);
        const int64_t cols = divisor > 0 ? divisor : most;
        const int64_t rows = std::clamp<int64_t>(kHalfBlockAccumulators / cols, 1, shape[2]);
        blocked_shapes.insert(blocked_shapes.begin(), {1, rows, cols});
      }
    }
    // AVX2 (16 registers), a dense conv whose block is one vector: two channel blocks first
    // (2 x 2 x 2, then 1 x 2 x 6, 2 x 1 x 4), the weights packed per parallel tile (cache_read
    // at the tile: the blocked weights' layout walks them with a stride of a whole kernel) and
    // the channel lanes unrolled by 2. With one block every broadcast input feeds a single FMA.
    // On Zen 3 (AVX2, 2 threads, bench_rules --blocked) packing took the first rule of conv
    // 3x3/64/56x56 from 3203 to 1703-2082 us and of 3x3/128/28x28 from 3397 to 1862-2011 us
    // (oneDNN jit:avx2 1611-2217 us); 300-trial tunings there picked 1 x 2 x 5-6, packed, unroll 2.
    int64_t unroll_k = 4;
    int64_t pack = 0;
    if (c.target.vector_registers < 32 && params.ok() && !params->depthwise() &&
        shape[4] == lanes) {
      const int64_t half = std::max<int64_t>(1, std::min<int64_t>(ow, acc / 2));
      blocked_shapes = {{2, 2, cols_for(4)},
                        {1, 2, half},
                        {2, 1, cols_for(2)},
                        {1, 2, std::max<int64_t>(1, half - 1)},
                        {1, 1, c.FirstTileColumns(ow)}};
      // A whole output row that fits the accumulators (7 x 7 maps): one channel block x the row
      // first (conv 3x3/512/7x7: 2281 us against 3429 us for 2 x 2 x 3 here).
      if (ow <= acc) {
        std::rotate(blocked_shapes.begin(), blocked_shapes.begin() + 4, blocked_shapes.begin() + 5);
      } else if (taps == 1) {
        // 1x1 kernels: rows share no inputs, so one row of columns first (two blocks x 5
        // columns read each input-channel block's row 160 bytes at a time, 2 x 2 x 2 two rows
        // 64 bytes at a time): 1x1 48->48 at 160x160 1084-1375 us against 1933-3059 (AVX2).
        std::rotate(blocked_shapes.begin(), blocked_shapes.begin() + 2, blocked_shapes.begin() + 3);
      }
      // An input block of 4 lanes or fewer (nchw4c, or a plain input's few channels) unrolled
      // whole: 1x1 12->96 from nchw4c at 160x160, 2 x 1 x 5, 776-840 us by 2, 515-559 by 4.
      unroll_k = params->cblock > 0 && params->cblock <= 4 ? params->cblock : 2;
      // 1x1 kernels walk the blocked weights contiguously already: a copy is pure overhead.
      pack = taps > 1 ? 1 : 0;
    }
    if (grouped) {  // tiles of a group's blocks
      std::erase_if(blocked_shapes, [&](const auto& bs) { return shared_blocks % bs[0] != 0; });
      // On 16 registers one block x one row of columns first, its padding inlined (a group's
      // few blocks share little: two rows or two blocks gain less than the padding's pass at
      // root costs). AVX2 code, 3x3 at 14x14, us (Zen 4, 2 threads): 152 ch / 19 groups (one
      // block a group) 1 x 1 x 7 inlined 26-31, 1 x 2 x 6 at root 51-74, the plain
      // channel-vector path 45; 160 ch / 10 groups (two blocks) 54 against 61 for 2 x 2 x 2.
      if (c.target.vector_registers < 32) {
        auto row = std::find_if(blocked_shapes.begin(), blocked_shapes.end(),
                                [](const auto& bs) { return bs[0] == 1 && bs[1] == 1; });
        if (row != blocked_shapes.end()) std::rotate(blocked_shapes.begin(), row, row + 1);
      }
    }
    // Each shape with the padding computed once at root, then the first one with it inlined
    // (a depthwise conv reads each input element a few times only: a padded copy of the whole
    // input can cost as much as the convolution).
    // Inlined first for depthwise convolutions: with the window's columns unrolled whole
    // (ApplyTiles) the copy is the slower, at stride 1 too (2 threads, Zen 4, bench_rules
    // --blocked, us, inlined / copied: AVX-512 3x3 32ch 112x112 40 / 119, 3x3/2 96ch 112x112
    // 58 / 195, 5x5 240ch 28x28 41 / 68; AVX2 48 / 124, 39 / 92, 43 / 69). Dense convolutions
    // inline it first where the tile's window columns unroll (ApplyTiles: kMaxUnrolledWindowOps),
    // so that the products of the padding drop out of the code (codegen/zero_taps.h): the copy
    // costs a pass over the input and its border taps multiply zeros (3x3 convs, 2 threads, Zen 4
    // AVX-512, bench_rules --blocked, us, the session's start / inlined first: 64ch 56x56 1044 /
    // 1058, 128ch 28x28 1029 / 1020, 256ch 14x14 1001 / 918, 512ch 7x7 1007 / 838; oneDNN 849-995).
    // Not a model's plain-input first conv (its own rule: Defaults). (A sepconv2d's padding is its
    // depthwise part's.)
    absl::StatusOr<ir::Conv2dParams> padded = PaddedConvParams(c.workload.spec);
    auto inline_first = [&](const int64_t* bs) {
      if (!padded.ok()) return false;
      if (padded->depthwise()) return true;
      // One row a tile: with several, the rows' guards vary inside the unrolled tile and stay
      // selects (AVX2 on Zen 4, 2 x 2 x 2 tiles, us, inlined / copied: 3x3 64ch 56x56 1202 /
      // 1130, 128ch 28x28 1192 / 1082).
      const int64_t ops = unroll_k * c.VectorsFor(kv_tile) * bs[0] * bs[1] * bs[2];
      return !c.an.plain_input_conv && bs[1] == 1 && UnrollsWindowLoop(ops, padded->s);
    };
    std::vector<std::pair<const int64_t*, bool>> variants, others;
    for (const auto& bs : blocked_shapes) {
      const bool first = inline_first(bs.data());
      variants.emplace_back(bs.data(), first);
      if (!c.pad_slot.empty()) others.emplace_back(bs.data(), !first);
    }
    if (!others.empty()) variants.insert(variants.begin() + 1, others.front());
    variants.insert(variants.end(), others.begin() + (others.empty() ? 0 : 1), others.end());
    // Chunked candidates (ApplyTiles): 4 channel blocks x the columns left in the register
    // file, as many rows as keep the output tile in the L1 cache and leave 8 tiles per core,
    // the chunks below, the padding computed once. First (16 registers) for every kernel
    // wider than 1x1 and where the weights do not fit an L2 cache (more than 1 MiB): conv
    // 3x3/512/7x7 on Zen 3 (AVX2, 2 threads) took 1.7-1.8 ms chunked against 2.0-2.1 ms for
    // its best tuned record, conv 3x3/256/14x14 1.53-1.57 ms against 1.71-1.98 ms; the tuned
    // best of all 12 3x3 tasks of ResNet-18 was chunked, and with chunked rules first the
    // untuned ResNet-18 took 26-29 ms against 29-37 ms, PP-OCR det 61-69 ms against 99-129 ms
    // (alternated, session 11).
    // Input-channel blocks per chunk: enough that each accumulator loaded and stored serves 16
    // blocks x taps (3x3: 2; 1x1: 8, else the largest divisor below), then half and twice that.
    // A 1x1 conv chunked by 2 blocks reloads its accumulators every 16 multiply-adds per lane:
    // AVX2, 2 threads, chunked 2 / 4 / 8, us: 192->192 at 40x40 1511 / 804 / 798, 384->384 at
    // 20x20 1421-1491 / 779-788 / 771-796, 64->256 at 56x56 1450-1467 / 804-822 / -.
    std::vector<int64_t> chunk_sizes;
    if (c.chunk_slot >= 0 && params.ok()) {
      const int64_t want = std::max<int64_t>(1, (16 + taps - 1) / taps);
      for (int64_t w : {want, want / 2, want * 2, want / 4, want / 8}) {
        const int64_t ch = c.Nearest(c.chunk_slot, std::max<int64_t>(w, 1));
        if (ch > 0 && chunk_sizes.size() < 3 &&
            std::find(chunk_sizes.begin(), chunk_sizes.end(), ch) == chunk_sizes.end()) {
          chunk_sizes.push_back(ch);
        }
      }
    }
    std::vector<std::vector<int64_t>> chunked;
    if (!chunk_sizes.empty()) {
      const int64_t per_col = c.VectorsFor(shape[4]);
      int64_t tk = c.Nearest(c.tile_slot[1], std::min<int64_t>(4, shape[1]));
      int64_t tx = c.Nearest(c.tile_slot[3], std::clamp<int64_t>(acc / (tk * per_col), 1, ow));
      // Where 4 blocks leave a tail tile (a second, guarded copy of the code), the most of 3, 2
      // or 1 that divide the blocks, with the columns of at least half the accumulators that
      // leave the shortest tail: a 1x1 672->112 at 14x14 on AVX2 (14 blocks of 8) took 202-217
      // us as 4 x 3, 139-158 as 2 x 5, 156-176 as 2 x 4, 170-183 as 2 x 6; 240->40 at 28x28 (5
      // blocks) 161-170 as 4 x 3, 87-88 as 1 x 7; 384->360 at 20x20 (45) 579-586 as 4 x 3,
      // 503-514 as 3 x 4 (Zen 4, 2 threads, bench_built_kernel). Where 4 divide the blocks, a
      // column tail costs less than any other shape (7x7 maps: 4 x 3 against 4 x 2, 2 x 4,
      // 1 x 7, 2 x 5 on 1x1 672->160, 1152->320 and 3x3 512->512). Not for one output pixel
      // (squeeze-excitation's 1x1s on a pooled map: 480->20 0.9 -> 1.8 us as 1 x 1).
      if (shape[1] % tk != 0 && shape[2] * ow > 1) {
        for (int64_t bk : {3, 2, 1}) {
          if (bk >= tk || shape[1] % bk != 0) continue;
          tk = c.Nearest(c.tile_slot[1], bk);
          const int64_t most = std::max<int64_t>(1, std::min(ow, acc / (bk * per_col)));
          int64_t cols = most;
          for (int64_t cx = most; 2 * cx >= most; --cx) {
            if ((ow + cx - 1) / cx * cx < (ow + cols - 1) / cols * cols) cols = cx;
          }
          tx = c.Nearest(c.tile_slot[3], cols);
          break;
        }
      }
      int64_t ty = 1;
      for (int64_t r = 1; r <= shape[2]; ++r) {
        const int64_t tasks = shape[0] * ((shape[1] + tk - 1) / tk) * ((shape[2] + r - 1) / r);
        if (shape[2] % r == 0 && c.ChunkedTileBytes(1, tk, r) <= kMaxChunkedTileBytes &&
            tasks >= 8 * c.target.cores) {
          ty = r;
        }
      }
      for (int64_t ch : chunk_sizes) {
        std::vector<int64_t> d = c.Defaults();
        d[c.chunk_slot] = ch;
        d[c.tile_slot[0]] = c.Nearest(c.tile_slot[0], 1);
        d[c.tile_slot[1]] = tk;
        d[c.tile_slot[2]] = c.Nearest(c.tile_slot[2], ty);
        d[c.tile_slot[3]] = tx;
        d[c.tile_slot[4]] = c.Nearest(c.tile_slot[4], kv_tile);
        // Parallel over (images, channel tiles, row tiles): the columns are one tile.
        d[c.parallel_slot] = c.Nearest(c.parallel_slot, 3);
        d[c.unroll_k_slot] = c.Nearest(c.unroll_k_slot, 8);
        for (int slot : c.pack_slot) d[slot] = c.Nearest(slot, 0);
        chunked.push_back(std::move(d));
      }
    }
    const int64_t weight_bytes =
        params.ok() ? params->k * params->c / params->groups * taps * 4 : 0;
    // Not where the output block is narrower than a vector (half-width accumulators): PP-OCR
    // det's 3x3 96->24 at 160x160 in blocks of 8 on AVX-512 took 21-30 ms chunked, 9.1-10.1 ms
    // with the first unchunked shapes (1 x 1 x 10, 48-trial tuning, 2 threads).
    // On 32-register targets never first: bench_rules --blocked on AVX-512 (Ice Lake, 2
    // threads) timed the chunked candidates of conv 3x3/64/56x56, /128/28x28 and /256/14x14 at
    // 3.1-3.5 ms against 0.9-1.4 ms for the unchunked 4-block tiles below (and /512/7x7 at 1.4
    // ms against 1.5).
    // On 16 registers 1x1 kernels too, where a chunk holds 4 blocks or more: AVX2, 2 threads,
    // chunked / the first unchunked tile (2 x 2 x 2), us: 1x1 256->256 at 14x14 180 / 192-197,
    // 64->256 at 56x56 804-822 / 920-996, 96->16 at 160x160 884-906 / 3662-3970, 192->192 at
    // 40x40 798-837 / 1066-1330, 384->384 at 20x20 771-796 / 1227-1297, 128->128 at 12x160
    // 505-550 / 544-604 (the 2 x 2 x 2 tile reads as many input streams as blocks x rows).
    // And 1x1 kernels whose output block is narrower than the vector (half-vector
    // accumulators): 1x1 48->12 in blocks of 4 at 160x160 556-594 us chunked by 3 blocks,
    // 1288-1750 as 1 x 1 x 10.
    const bool chunks_pay = weight_bytes > (int64_t{1} << 20) ||
                            (!chunk_sizes.empty() && chunk_sizes.front() * taps >= 4);
    const bool narrow_1x1 = taps == 1 && shape[4] < lanes;
    const bool chunked_first =
        c.target.vector_registers < 32 && ((chunks_pay && shape[4] % lanes == 0) || narrow_1x1);
    // Otherwise (small 1x1 kernels, narrow blocks) one of them third (measured in the first
    // round), the others last.
    size_t next_chunked = 0;
    auto emit_chunked = [&](size_t count) {
      for (; count > 0 && next_chunked < chunked.size(); --count, ++next_chunked) {
        if (!c.Full()) c.Emit(std::move(chunked[next_chunked]));
      }
    };
    if (chunked_first) emit_chunked(chunked.size());
    for (const auto& [bs, inline_pad] : variants) {
      if (c.size() == 2) emit_chunked(1);
      if (c.Full()) break;
      std::vector<int64_t> d = c.Defaults();
      if (inline_pad) {
        for (int slot : c.pad_slot) d[slot] = c.Nearest(slot, 0);
      }
      d[c.tile_slot[0]] = c.Nearest(c.tile_slot[0], 1);
      d[c.tile_slot[1]] = c.Nearest(c.tile_slot[1], bs[0]);
      d[c.tile_slot[2]] = c.Nearest(c.tile_slot[2], bs[1]);
      d[c.tile_slot[3]] = c.Nearest(c.tile_slot[3], bs[2]);
      d[c.tile_slot[4]] = c.Nearest(c.tile_slot[4], kv_tile);
      std::vector<int64_t> outer(n);
      for (size_t a = 0; a < n; ++a)
        outer[a] = (shape[a] + d[c.tile_slot[a]] - 1) / d[c.tile_slot[a]];
      int64_t fused = 1;
      size_t depth = 0;
      while (depth < n - 1 && fused < 4 * c.target.cores) fused *= outer[depth++];
      d[c.parallel_slot] =
          c.Nearest(c.parallel_slot, static_cast<int64_t>(std::max<size_t>(depth, 1)));
      d[c.swap_slot] = c.Nearest(c.swap_slot, 0);
      d[c.vec_slot] = c.Nearest(c.vec_slot, 1);
      d[c.unroll_slot] = c.Nearest(c.unroll_slot, 1);
      d[c.unroll_k_slot] = c.Nearest(c.unroll_k_slot, unroll_k);
      for (int slot : c.pack_slot) d[slot] = c.Nearest(slot, pack);
      c.Emit(std::move(d));
    }
    emit_chunked(chunked.size());
  }
  return false;
}

}  // namespace

std::unique_ptr<CpuRule> MakeBlockedConvRule() { return std::make_unique<BlockedConvRule>(); }

}  // namespace lathe::tuner::internal
