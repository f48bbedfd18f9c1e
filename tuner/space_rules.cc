// \file
// The CPU search space's rule-picked candidates (SearchSpace::Heuristic): register tiles that
// fill the target's vector registers, the inputs a tile walks along packed, the outer loops
// parallel, each rule with the measurements that chose it. The space itself: space.cc.
#include <algorithm>
#include <array>
#include <set>
#include <utility>

#include "ir/ops.h"
#include "tuner/cpu_space.h"

namespace lathe::tuner::internal {

std::vector<Candidate> CpuSpace::Heuristic(int max) const {
  std::vector<Candidate> out;
  if (max <= 0) return out;
  const std::vector<int64_t>& shape = workload_->output()->shape;
  const size_t n = out_axes_.size();
  const int lanes = target_.vector_lanes;
  // Accumulators a register tile may hold: the file less a broadcast and a row of inputs.
  const int acc_regs = std::max(1, target_.vector_registers - 4);
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
  if (n >= 3) {
    // Outputs with a channel axis before the rows (convolutions): the channels as the tile's
    // rows (one broadcast weight per channel), or a few of each.
    shapes.insert(shapes.begin() + 1, {c2, 1, acc_regs / 2, 2, true});
    shapes.insert(shapes.begin() + 3, {lanes, acc_regs / 4, 2, 4, true});
    // First: one vector of columns, two rows, the rest of the file in channels, the kernel's
    // columns unrolled (the best of every 300-trial tuning of conv 3x3/128/28x28 here: each
    // input vector serves every channel, each broadcast weight both rows).
    shapes.insert(shapes.begin(), {lanes, 2, acc_regs / 2, 4, false});
  }
  std::set<std::vector<int64_t>> seen;
  // Every decision at its first choice, paddings computed once at root.
  auto defaults = [&] {
    std::vector<int64_t> d(slots_.size(), 0);
    for (size_t i = 0; i < slots_.size(); ++i) d[i] = slots_[i].choices.front();
    for (int slot : pad_slot_) d[slot] = Nearest(slot, 1);
    // Long row reductions as vector partial results (softmax 1536x128 on AVX2: 1.04 ms
    // without, 0.35 ms tuned with; layer_norm 128x768: 163 -> 73 us).
    for (int slot : rfactor_slot_) {
      if (slot >= 0) d[slot] = Nearest(slot, lanes);
    }
    // Row statistics (and their partial results) per row tile, in the output's parallel loop
    // (softmax 1536x128 on Zen 3: 888-1114 us at root, 150-226 us per tile).
    for (int slot : side_slot_) d[slot] = Nearest(slot, 1);
    return d;
  };
  auto emit = [&](std::vector<int64_t> d) {
    if (!seen.insert(d).second) return;
    Candidate c;
    c.sketch = 0;
    c.decisions = std::move(d);
    auto f = Finish(std::move(c));
    if (f.ok()) out.push_back(std::move(*f));
  };
  // Winograd transforms: the positions whole and unrolled, the channel block as the vector
  // and the padding computed once at root (their slots allow nothing else), one or two
  // blocks per tile; parallel over the outer loops until every core has several iterations.
  if (!an_.unrolled_axes.empty()) {
    const size_t chan = workload_->spec.op == "winograd_in" ? n - 2 : 1;
    for (const int64_t blocks : {1, 2}) {
      if (static_cast<int>(out.size()) >= max) break;
      std::vector<int64_t> d = defaults();
      // (The positions' slots hold only their whole extent: Nearest picks it.)
      for (size_t a = 0; a + 1 < n; ++a) d[tile_slot_[a]] = Nearest(tile_slot_[a], 1);
      d[tile_slot_[chan]] = Nearest(tile_slot_[chan], blocks);
      d[tile_slot_[n - 1]] = Nearest(tile_slot_[n - 1], shape[n - 1]);
      int64_t fused = 1;
      size_t depth = 0;
      while (depth < n - 1 && fused < 4 * target_.cores) {
        fused *= (shape[depth] + d[tile_slot_[depth]] - 1) / d[tile_slot_[depth]];
        ++depth;
      }
      d[parallel_slot_] = Nearest(parallel_slot_, static_cast<int64_t>(std::max<size_t>(depth, 1)));
      d[vec_slot_] = Nearest(vec_slot_, 1);
      for (int slot : pad_slot_) d[slot] = Nearest(slot, 1);
      emit(std::move(d));
    }
    return out;
  }
  // Blocked convolutions: the output channel block is the vector; (channel blocks, rows,
  // columns) of accumulators fill the register file (less a weight vector or two and a
  // broadcast), columns first: each broadcast input pixel serves every channel block, each
  // weight vector every pixel of the tile. Parallel over the outer loops; weights already
  // blocked, nothing packed; the kernel's channel lanes unrolled by 4.
  if (an_.blocked_conv && n == 5) {
    const int64_t ow = shape[3];
    // (channel blocks, rows, columns), the columns the most that fit (divisors of ow first).
    const int64_t acc = acc_regs;
    auto cols_for = [&](int64_t per_col) {
      int64_t best = 1;
      for (int64_t c = 1; c * per_col <= acc && c <= ow; ++c) {
        if (ow % c == 0) best = c;
      }
      // A divisor under half the file wastes it: take the most columns that fit instead.
      if (best * per_col * 2 <= acc) best = std::min<int64_t>(ow, acc / per_col);
      return best;
    };
    // Half the file in one row of columns first: a full file of accumulators leaves LLVM too
    // few registers for the weights and broadcasts (a 1 x 28 tile measured 2x slower than
    // 1 x 14 or 2 x 14 on AVX-512).
    const int64_t first = target_.vector_registers >= 32 ? 2 : 1;
    std::vector<std::array<int64_t, 3>> blocked_shapes = {{1, 1, cols_for(first)},
                                                          {1, 2, cols_for(2)},
                                                          {2, 1, cols_for(2)},
                                                          {1, 2, cols_for(4)},
                                                          {2, 2, cols_for(4)}};
    absl::StatusOr<ir::Conv2dParams> params = ir::GetConv2dParams(workload_->spec);
    // 32 registers, a dense conv with whole-vector blocks and at least 4 of them: 4 channel
    // blocks x up to 6 columns (24 accumulators; or 5 x 4, 3 x 8, 6 x 4) first, as oneDNN's kernels
    // tile: per input channel and tap 4 weight vectors and 6 broadcasts feed 24 FMAs, where one
    // block x 14 columns loads 15 operands for 14 FMAs. AVX-512, 2 threads: conv 1x1/256/14x14 4 x
    // 6 115-138 us, 4 x 7 151-179, 1 x 14 190-198 (oneDNN 87); conv 3x3/128/28x28 4 x 4 1165 us, 1
    // x 14 1410-2059; 3x3/256/14x14 4 x 6 (a tail on 14 columns) 912 us, chunked 3088.
    if (target_.vector_registers >= 32 && params.ok() && !params->depthwise() &&
        shape[4] == lanes && shape[1] >= 4) {
      // The channel blocks a tile takes divide the output's (4, else 5, 3 or 6): a tail tile
      // of blocks costs more than the shape gains (conv 1x1 240->240 at 12x80, 15 blocks: 4 x
      // 5 with a tail 550-701 us, 5 x 4 402-538, 3 x 5 407-491).
      int64_t blocks = 4;
      for (int64_t b : {4, 5, 3, 6}) {
        if (shape[1] % b == 0) {
          blocks = b;
          break;
        }
      }
      const int64_t max_cols = std::min<int64_t>(24 / blocks, ow);
      int64_t cols = 1;
      for (int64_t c = 1; c <= max_cols; ++c) {
        if (ow % c == 0) cols = c;
      }
      if (3 * cols < 2 * max_cols) cols = max_cols;  // a tail beats a thin tile
      blocked_shapes.insert(blocked_shapes.begin(), {blocks, 1, cols});
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
    if (target_.vector_registers < 32 && params.ok() && !params->depthwise() && shape[4] == lanes) {
      const int64_t half = std::max<int64_t>(1, std::min<int64_t>(ow, acc / 2));
      blocked_shapes = {{2, 2, cols_for(4)},
                        {1, 2, half},
                        {2, 1, cols_for(2)},
                        {1, 2, std::max<int64_t>(1, half - 1)},
                        {1, 1, cols_for(first)}};
      // A whole output row that fits the accumulators (7 x 7 maps): one channel block x the row
      // first (conv 3x3/512/7x7: 2281 us against 3429 us for 2 x 2 x 3 here).
      if (ow <= acc) {
        std::rotate(blocked_shapes.begin(), blocked_shapes.begin() + 4, blocked_shapes.begin() + 5);
      }
      unroll_k = 2;
      // 1x1 kernels walk the blocked weights contiguously already: a copy is pure overhead.
      pack = params->r * params->s > 1 ? 1 : 0;
    }
    // Each shape with the padding computed once at root, then the first one with it inlined
    // (a depthwise conv reads each input element a few times only: a padded copy of the whole
    // input can cost as much as the convolution).
    // Inlined first where each input element is read at most 9 times (a depthwise 3x3, or a
    // strided 5x5: measured 1.5-2.5x faster so on AVX-512); a depthwise 5x5 at stride 1 and
    // dense convolutions read each element far more often and keep the copy.
    bool inline_first = false;
    if (params.ok()) {
      inline_first =
          params->depthwise() && params->r * params->s <= 9 * params->stride_h * params->stride_w;
    }
    std::vector<std::pair<const int64_t*, bool>> variants, others;
    for (const auto& bs : blocked_shapes) {
      variants.emplace_back(bs.data(), inline_first);
      if (!pad_slot_.empty()) others.emplace_back(bs.data(), !inline_first);
    }
    if (!others.empty()) variants.insert(variants.begin() + 1, others.front());
    variants.insert(variants.end(), others.begin() + (others.empty() ? 0 : 1), others.end());
    // Chunked candidates (ApplyTiles): 4 channel blocks x the columns left in the register
    // file, as many rows as keep the output tile in the L1 cache and leave 8 tiles per core,
    // two input-channel blocks per chunk, the padding computed once. First for every kernel
    // wider than 1x1 and where the weights do not fit an L2 cache (more than 1 MiB): conv
    // 3x3/512/7x7 on Zen 3 (AVX2, 2 threads) took 1.7-1.8 ms chunked against 2.0-2.1 ms for
    // its best tuned record, conv 3x3/256/14x14 1.53-1.57 ms against 1.71-1.98 ms; the tuned
    // best of all 12 3x3 tasks of ResNet-18 was chunked, and with chunked rules first the
    // untuned ResNet-18 took 26-29 ms against 29-37 ms, PP-OCR det 61-69 ms against 99-129 ms
    // (alternated, session 11).
    std::vector<std::vector<int64_t>> chunked;
    if (chunk_slot_ >= 0 && params.ok()) {
      const int64_t tk = Nearest(tile_slot_[1], std::min<int64_t>(4, shape[1]));
      const int64_t tx =
          Nearest(tile_slot_[3], std::clamp<int64_t>(acc / (tk * VectorsFor(shape[4])), 1, ow));
      int64_t ty = 1;
      for (int64_t r = 1; r <= shape[2]; ++r) {
        const int64_t tasks = shape[0] * ((shape[1] + tk - 1) / tk) * ((shape[2] + r - 1) / r);
        if (shape[2] % r == 0 && ChunkedTileBytes(1, tk, r) <= kMaxChunkedTileBytes &&
            tasks >= 8 * target_.cores) {
          ty = r;
        }
      }
      for (int64_t ch : {2, 1, 4}) {
        std::vector<int64_t> d = defaults();
        d[chunk_slot_] = Nearest(chunk_slot_, ch);
        d[tile_slot_[0]] = Nearest(tile_slot_[0], 1);
        d[tile_slot_[1]] = tk;
        d[tile_slot_[2]] = Nearest(tile_slot_[2], ty);
        d[tile_slot_[3]] = tx;
        d[tile_slot_[4]] = Nearest(tile_slot_[4], shape[4]);
        // Parallel over (images, channel tiles, row tiles): the columns are one tile.
        d[parallel_slot_] = Nearest(parallel_slot_, 3);
        d[unroll_k_slot_] = Nearest(unroll_k_slot_, 8);
        for (int slot : pack_slot_) d[slot] = Nearest(slot, 0);
        chunked.push_back(std::move(d));
      }
    }
    const int64_t weight_bytes =
        params.ok() ? params->k * params->c / params->groups * params->r * params->s * 4 : 0;
    // Not where the output block is narrower than a vector (half-width accumulators): PP-OCR
    // det's 3x3 96->24 at 160x160 in blocks of 8 on AVX-512 took 21-30 ms chunked, 9.1-10.1 ms
    // with the first unchunked shapes (1 x 1 x 10, 48-trial tuning, 2 threads).
    // On 32-register targets never first: bench_rules --blocked on AVX-512 (Ice Lake, 2
    // threads) timed the chunked candidates of conv 3x3/64/56x56, /128/28x28 and /256/14x14 at
    // 3.1-3.5 ms against 0.9-1.4 ms for the unchunked 4-block tiles below (and /512/7x7 at 1.4
    // ms against 1.5).
    const bool chunked_first =
        (weight_bytes > (int64_t{1} << 20) || (params.ok() && params->r * params->s > 1)) &&
        shape[4] % lanes == 0 && target_.vector_registers < 32;
    // Otherwise (1x1 kernels, narrow blocks) one of them third (measured in the first round),
    // the others last.
    size_t next_chunked = 0;
    auto emit_chunked = [&](size_t count) {
      for (; count > 0 && next_chunked < chunked.size(); --count, ++next_chunked) {
        if (static_cast<int>(out.size()) < max) emit(std::move(chunked[next_chunked]));
      }
    };
    if (chunked_first) emit_chunked(chunked.size());
    for (const auto& [bs, inline_pad] : variants) {
      if (out.size() == 2) emit_chunked(1);
      if (static_cast<int>(out.size()) >= max) break;
      std::vector<int64_t> d = defaults();
      if (inline_pad) {
        for (int slot : pad_slot_) d[slot] = Nearest(slot, 0);
      }
      d[tile_slot_[0]] = Nearest(tile_slot_[0], 1);
      d[tile_slot_[1]] = Nearest(tile_slot_[1], bs[0]);
      d[tile_slot_[2]] = Nearest(tile_slot_[2], bs[1]);
      d[tile_slot_[3]] = Nearest(tile_slot_[3], bs[2]);
      d[tile_slot_[4]] = Nearest(tile_slot_[4], shape[4]);
      std::vector<int64_t> outer(n);
      for (size_t a = 0; a < n; ++a)
        outer[a] = (shape[a] + d[tile_slot_[a]] - 1) / d[tile_slot_[a]];
      int64_t fused = 1;
      size_t depth = 0;
      while (depth < n - 1 && fused < 4 * target_.cores) fused *= outer[depth++];
      d[parallel_slot_] = Nearest(parallel_slot_, static_cast<int64_t>(std::max<size_t>(depth, 1)));
      d[swap_slot_] = Nearest(swap_slot_, 0);
      d[vec_slot_] = Nearest(vec_slot_, 1);
      d[unroll_slot_] = Nearest(unroll_slot_, 1);
      d[unroll_k_slot_] = Nearest(unroll_k_slot_, unroll_k);
      for (int slot : pack_slot_) d[slot] = Nearest(slot, pack);
      emit(std::move(d));
    }
    emit_chunked(chunked.size());
  }
  // Vectorized over the channels (NCHW convolutions): (channel vectors, rows, columns) of
  // accumulators, the kernel's columns unrolled, parallel over the channel tiles.
  if (chan_slot_ >= 0) {
    const size_t ca = static_cast<size_t>(an_.chan_axis);
    const int64_t chan_shapes[][3] = {{2, 1, 4}, {4, 1, 2}, {2, 2, 2}, {1, 2, 4}};
    for (const auto& cs : chan_shapes) {
      if (static_cast<int>(out.size()) >= max) break;
      std::vector<int64_t> d = defaults();
      for (size_t a = 0; a < n; ++a) {
        int64_t want = 1;
        if (a == ca) want = cs[0] * lanes;
        if (a + 1 == n) want = cs[2];
        if (a + 2 == n && a != ca) want = cs[1];
        d[tile_slot_[a]] = Nearest(tile_slot_[a], want);
      }
      d[parallel_slot_] = Nearest(parallel_slot_, static_cast<int64_t>(ca + 1));
      d[unroll_slot_] = Nearest(unroll_slot_, 1);
      d[unroll_k_slot_] = Nearest(unroll_k_slot_, 2);
      d[chan_slot_] = 1;
      emit(std::move(d));
    }
  }
  // Matmuls with B in column panels (i, panel, column): a whole panel's columns x as many rows
  // as the accumulators allow, one panel per tile, nothing packed (B is contiguous per k
  // already, and A's row is a broadcast). BERT's FFN1 (128x3072x768, bias+GELU, panels of 16)
  // on Zen 3 (AVX2, 2 threads): 6 x 16 took 4.3-4.9 ms (k unrolled by 4: 4.3, by 2: 4.7) where
  // the same tile over row-major B, which must copy each panel on every call, took 5.7-6.6 ms.
  if (an_.panel_matmul && (n == 3 || n == 4)) {
    const size_t o = n - 3;  // a batch axis first: one batch per tile
    const int64_t vecs = VectorsFor(shape[o + 2]);
    const int64_t panel_shapes[][3] = {// rows, panels, unroll_k
                                       {acc_regs / vecs, 1, 4},
                                       {acc_regs / vecs, 1, 2},
                                       {acc_regs / (2 * vecs), 2, 2},
                                       {std::max<int64_t>(1, acc_regs / vecs - 2), 1, 2}};
    for (const auto& ps : panel_shapes) {
      if (static_cast<int>(out.size()) >= max) break;
      std::vector<int64_t> d = defaults();
      if (o == 1) d[tile_slot_[0]] = Nearest(tile_slot_[0], 1);
      d[tile_slot_[o]] = Nearest(tile_slot_[o], std::max<int64_t>(1, ps[0]));
      d[tile_slot_[o + 1]] = Nearest(tile_slot_[o + 1], ps[1]);
      d[tile_slot_[o + 2]] = Nearest(tile_slot_[o + 2], shape[o + 2]);
      // The (batches and) panels (ApplyTiles: outermost).
      d[parallel_slot_] = Nearest(parallel_slot_, static_cast<int64_t>(o + 1));
      d[vec_slot_] = Nearest(vec_slot_, 1);
      d[unroll_slot_] = Nearest(unroll_slot_, 1);
      d[unroll_k_slot_] = Nearest(unroll_k_slot_, ps[2]);
      for (int slot : pack_slot_) d[slot] = Nearest(slot, 0);
      emit(std::move(d));
    }
  }
  for (const Shape& sh : shapes) {
    if (static_cast<int>(out.size()) >= max) break;
    std::vector<int64_t> d = defaults();
    // Tiles: columns on the innermost axis, rows on the next, `third` on the one before.
    for (size_t a = 0; a < n; ++a) {
      int64_t want = 1;
      if (a + 1 == n) want = std::min(sh.cols, shape[a]);
      if (a + 2 == n) want = sh.rows;
      if (a + 3 == n) want = sh.third;
      d[tile_slot_[a]] = Nearest(tile_slot_[a], want);
    }
    // Parallel: the fewest outer loops that give every core several iterations; with two
    // axes, the column tiles outermost so that a packed panel serves every row tile.
    // Row statistics (softmax, layer_norm): rows outermost, so that the statistics go per row
    // tile (defaults()).
    const bool swap = n == 2 && side_slot_.empty();
    std::vector<int64_t> outer(n);
    for (size_t a = 0; a < n; ++a) outer[a] = (shape[a] + d[tile_slot_[a]] - 1) / d[tile_slot_[a]];
    if (swap) std::swap(outer[n - 1], outer[n - 2]);
    int64_t fused = 1;
    size_t depth = 0;
    while (depth < n && fused < 4 * target_.cores) fused *= outer[depth++];
    d[parallel_slot_] = Nearest(parallel_slot_, static_cast<int64_t>(std::max<size_t>(depth, 1)));
    d[swap_slot_] = Nearest(swap_slot_, swap ? 1 : 0);
    d[vec_slot_] = Nearest(vec_slot_, 1);
    d[unroll_slot_] = Nearest(unroll_slot_, 1);
    d[unroll_k_slot_] = Nearest(unroll_k_slot_, sh.unroll_k);
    for (size_t p = 0; p < pack_slot_.size(); ++p) {
      d[pack_slot_[p]] = Nearest(pack_slot_[p], sh.pack && an_.pack_walks_inner[p] ? 1 : 0);
    }
    emit(std::move(d));
  }
  return out;
}

}  // namespace lathe::tuner::internal
