// \file
// The CPU search space's Apply: a candidate's decisions turned into a schedule (tiles, the
// parallel loop, the accumulator's register tile; a blocked convolution's chunks and pairs; the
// depthwise part of a sepconv2d). An NCHW convolution's channel vectors are in
// space_apply_channels.cc; the slots, the analysis and sampling in space.cc.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/ops.h"
#include "tuner/cpu_space.h"
#include "tuner/decisions.h"

namespace lathe::tuner {

namespace {

using ir::Schedule;
using ir::Stage;

// Splits the innermost reduce loop of `stage` (the last of `order`, its reduce loops) by
// `factor` when that is above 1: `order` then ends with both parts. Returns the inner part
// (to unroll), or "" when not split.
absl::StatusOr<std::string> SplitInnermostReduce(Schedule& s, const std::string& stage,
                                                 int64_t factor, std::vector<std::string>& order) {
  if (factor <= 1 || order.empty()) return std::string();
  LATHE_TRY_VALUE(parts, s.Split(stage, order.back(), {factor}));
  order.back() = parts[0];
  order.push_back(parts[1]);
  return parts[1];
}

// Whether `loop` of `st` iterates over root axis `axis` (is it, or split or fused from it).
bool IteratesOver(const Stage& st, const std::string& loop, const std::string& axis) {
  if (loop == axis) return true;
  for (const ir::Relation& r : st.relations) {
    if (std::find(r.outputs.begin(), r.outputs.end(), loop) == r.outputs.end()) continue;
    for (const std::string& in : r.inputs) {
      if (IteratesOver(st, in, axis)) return true;
    }
  }
  return false;
}

}  // namespace

namespace internal {

absl::StatusOr<Schedule> CpuSpace::Apply(const Candidate& c) const {
  LATHE_TRY(CheckDecisions(slots_, c.decisions));
  auto d = [&](int slot) { return c.decisions[slot]; };
  Schedule s(workload_);
  for (const std::string& st : an_.inline_stages) LATHE_TRY(s.ComputeInline(st));
  const bool dw_chan = dw_chan_slot_ >= 0 && d(dw_chan_slot_) != 0;
  for (size_t p = 0; p < an_.pad_stages.size(); ++p) {
    const std::string& st = an_.pad_stages[p];
    if (d(pad_slot_[p]) == 0) {
      // (Over channel vectors, inlined into the input's copy: ApplyDepthwiseChannels.)
      if (!dw_chan) LATHE_TRY(s.ComputeInline(st));
      continue;
    }
    // Computed once per call at root: the two outermost loops in parallel, the innermost
    // split into whole vectors.
    const Stage* ps = s.FindStage(st);
    std::vector<std::string> loops = ps->root_loops;
    std::string par = loops[0];
    if (loops.size() >= 3) {
      auto f = s.Fuse(st, {loops[0], loops[1]});
      if (!f.ok()) return f.status();
      par = *f;
    }
    LATHE_TRY(s.Parallel(st, par));
    LATHE_TRY_VALUE(vp, s.Split(st, loops.back(), {target_.vector_lanes}));
    LATHE_TRY(s.Vectorize(st, vp[1]));
  }
  // rfactor before the side stage is transformed: partial results over the inner part of
  // the reduce axis, rows outer, that part innermost and vectorized.
  std::vector<std::string> rf_of(an_.side.size());   // each side stage's partial results stage
  std::vector<std::string> rf_row(an_.side.size());  // ... and its outermost row loop
  for (size_t i = 0; i < an_.side.size(); ++i) {
    if (rfactor_slot_[i] < 0 || d(rfactor_slot_[i]) == 0) continue;
    const std::string& st = an_.side[i];
    const std::string axis = s.FindStage(st)->tensor->body->reduce_axes[0]->var->name;
    LATHE_TRY_VALUE(rf, s.RFactor(st, axis, d(rfactor_slot_[i])));
    // The partial results stored rows outer, axis.rf inner: each row's partials are one
    // vector (axis.rf outer, a vector store would scatter them a row count apart).
    std::vector<std::string> loops = s.FindStage(rf)->root_loops;  // axis.rf, rows..., axis.o
    std::vector<std::string> rows(loops.begin() + 1, loops.end() - 1);
    std::vector<std::string> layout = rows;
    layout.push_back(loops[0]);
    LATHE_TRY(s.StorageOrder(rf, layout));
    std::vector<std::string> order = rows;
    order.push_back(loops.back());
    order.push_back(loops[0]);
    LATHE_TRY(s.Reorder(rf, order));
    LATHE_TRY(s.Vectorize(rf, loops[0]));
    rf_of[i] = rf;  // placed with its side stage below
    if (!rows.empty()) rf_row[i] = rows[0];
  }
  // The output and its accumulator.
  const bool chan = chan_slot_ >= 0 && d(chan_slot_) != 0;
  LATHE_TRY_VALUE(first_outer, dw_chan ? ApplyDepthwiseChannels(s, c)
                               : chan  ? ApplyChannelsInner(s, c)
                                       : ApplyTiles(s, c));
  const std::string& o = an_.out;
  // A fused epilogue's accumulator computed per tile is the tile's own storage, as a
  // cache_write's is, where the vector axis ends in a partial vector: under its lane mask code
  // generation then stores the tile's vectors unmasked and keeps them in registers
  // (codegen/vectorize.cc), where masked stores kept them in memory. AVX2, 1x1 58->58 at 28x28
  // in one block of 58 (7.25 vectors): 109 -> 35 us, the partial vector's tile, an eighth of
  // the work, had taken most of the time; AVX-512 1x1 96->18 at 80x80 (kblock 18) 424 -> 184.
  // Not where the vectors are whole: a local tile's guards that no lane depends on (a last
  // tile of 1 block in tiles of 2) are then folded into masks, computing the whole tile (1x1
  // 672->112 at 14x14, 7 blocks of 16: 128 -> 148 us).
  if (!an_.cache_write && !an_.acc.empty() &&
      workload_->output()->shape.back() % target_.vector_lanes != 0) {
    const Stage* acc = s.FindStage(an_.acc);
    if (acc != nullptr && acc->attach != ir::AttachKind::kRoot) {
      LATHE_TRY(s.StorageScope(an_.acc, "local"));
    }
  }

  // Other reductions (softmax, layer_norm statistics): at root in parallel, or per tile row.
  // Per tile only where the tile loop runs over rows alone (a reduction along the rows is
  // whole in each of them: at a loop over columns it would be recomputed per column tile),
  // and where every consumer is computed per tile too (the output, a side stage at the tile or
  // its partial results): a stage at root (a side stage at root, its partial results) that
  // read one computed per tile would recompute it for each of its own points. A side stage's
  // partial results go where it goes: with softmax's two statistics and their partials at the
  // row tile, the whole softmax is one parallel loop (1536x128 on Zen 3: four parallel regions
  // before, 254-309 us against ONNX Runtime's 95 us).
  std::vector<bool> per_tile(an_.side.size(), false);  // placed at the tile, as applied
  const bool row_tiles =
      !an_.side.empty() && !IteratesOver(*s.FindStage(o), first_outer, out_axes_.back());
  for (size_t i = 0; i < an_.side.size(); ++i) {  // consumers first
    const std::string& st = an_.side[i];
    bool at = d(side_slot_[i]) != 0 && row_tiles;
    for (const std::string& c : s.Consumers(st)) {
      bool tiled = c == o;
      for (size_t j = 0; j < an_.side.size(); ++j) {
        tiled = tiled || (per_tile[j] && (c == an_.side[j] || c == rf_of[j]));
      }
      at = at && tiled;
    }
    if (at && s.ComputeAt(st, o, first_outer).ok()) {
      per_tile[i] = true;
      if (!rf_of[i].empty()) LATHE_TRY(s.ComputeAt(rf_of[i], o, first_outer));
      continue;
    }
    const Stage* ss = s.FindStage(st);
    if (!ss->tensor->axes.empty() && ss->tensor->shape[0] > 1) {
      LATHE_TRY(s.Parallel(st, ss->root_loops[0]));
    }
  }
  // Partial results at root: computed for every row, the rows in parallel where there are
  // several.
  for (size_t i = 0; i < an_.side.size(); ++i) {
    if (rf_of[i].empty() || rf_row[i].empty() || per_tile[i]) continue;
    if (s.FindStage(rf_of[i])->tensor->shape[0] >= 2 * target_.cores) {  // rows outer (above)
      LATHE_TRY(s.Parallel(rf_of[i], rf_row[i]));
    }
  }
  return s;
}

absl::StatusOr<std::string> CpuSpace::ApplyTiles(Schedule& s, const Candidate& c) const {
  auto d = [&](int slot) { return c.decisions[slot]; };
  if (an_.cache_write) LATHE_TRY(s.CacheWrite(an_.out, "local").status());
  const bool paired = Paired(c);
  if (paired) {
    // The accumulator tile stored (images, rows, columns, channel blocks, block): the blocks a
    // vector pairs are adjacent, so the tile's vectors are contiguous.
    const std::vector<std::string> sp = RootLoopsOf(*s.FindStage(an_.acc)).first;
    LATHE_TRY(s.StorageOrder(an_.acc, {sp[0], sp[2], sp[3], sp[1], sp[4]}));
  }
  std::vector<std::string> pack_stages;
  for (size_t p = 0; p < an_.pack.size(); ++p) {
    if (d(pack_slot_[p]) == 0) {
      pack_stages.emplace_back();
      continue;
    }
    LATHE_TRY_VALUE(name, s.CacheRead(an_.pack[p], "global", {an_.acc}));
    pack_stages.push_back(name);
  }

  // The output: tiles, outer loops first, the outermost ones fused and parallel.
  const std::string& o = an_.out;
  size_t n = out_axes_.size();
  // Chunked (dense blocked convolutions): the output tile is (channel blocks x rows x the
  // whole width); the accumulator keeps it in memory, small enough for the L1 cache, and adds
  // up one chunk of input-channel blocks at a time over register tiles of (channel blocks x
  // tile.x columns). Each chunk's weights are read from the cache for every register tile of
  // the output tile, instead of streamed from L2 or L3 once per register tile: what a 7x7 or
  // 14x14 map with hundreds of channels needs.
  const int64_t chunk = chunk_slot_ >= 0 ? d(chunk_slot_) : 0;
  const std::vector<int64_t>& shape = workload_->output()->shape;
  if (chunk > 0) {
    const int64_t regs =
        d(tile_slot_[1]) * d(tile_slot_[3]) * VectorsFor(shape[4]) / (paired ? PairFactor() : 1);
    const int64_t bytes = ChunkedTileBytes(d(tile_slot_[0]), d(tile_slot_[1]), d(tile_slot_[2]));
    if (regs > std::max(1, target_.vector_registers - 4) || bytes > kMaxChunkedTileBytes ||
        d(tile_slot_[4]) != shape[4]) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunked tile of ", regs, " registers and ", bytes, " bytes does not fit"));
    }
  }
  std::vector<std::string> outer, inner;
  for (size_t a = 0; a < n; ++a) {
    const int64_t t = chunk > 0 && a == 3 ? shape[3] : d(tile_slot_[a]);
    LATHE_TRY_VALUE(parts, s.Split(o, out_axes_[a], {t}));
    outer.push_back(parts[0]);
    inner.push_back(parts[1]);
  }
  if (an_.panel_matmul && (n == 3 || n == 4)) {
    // Panels outermost, the row tiles inside: each panel of B is read from memory once and
    // serves every row tile from the L2 cache. Rows outermost stream all of B once per row
    // tile, which a timing that repeats one kernel (B stays in L3) cannot tell apart, but a
    // model, whose other layers evict the weights, can: BERT's FFN matmuls (128x3072x768 and
    // 128x768x3072, 9.4 MB of weights each) took 6.9 and 5.6 ms in the model that way and 4.5
    // and 4.5 ms panels-outermost (Zen 3, AVX2, 2 threads), with the same 4.3 ms alone.
    // A batch_matmul's batch stays outside: each batch has panels of its own.
    std::swap(outer[n - 3], outer[n - 2]);
  } else if (d(swap_slot_) && n >= 2) {
    std::swap(outer[n - 1], outer[n - 2]);
  }
  // sepconv2d: row tiles outside the channel blocks, so that the depthwise part computed per
  // row tile (in the parallel loop over images and row tiles) serves every channel block.
  if (!an_.dw_out.empty()) std::swap(outer[1], outer[2]);
  std::vector<std::string> order = outer;
  order.insert(order.end(), inner.begin(), inner.end());
  LATHE_TRY(s.Reorder(o, order));
  size_t depth = static_cast<size_t>(d(parallel_slot_));
  std::vector<std::string> outer_loops;  // after fusion
  if (depth >= 2) {
    LATHE_TRY_VALUE(fused,
                    s.Fuse(o, std::vector<std::string>(outer.begin(), outer.begin() + depth)));
    outer_loops.push_back(fused);
  } else {
    outer_loops.push_back(outer[0]);
  }
  for (size_t a = depth < 2 ? 1 : depth; a < n; ++a) outer_loops.push_back(outer[a]);
  LATHE_TRY(s.Parallel(o, outer_loops[0]));
  // Vector loops whose width is not a whole number of registers (or a power of two) need
  // masked or gathered tails that cost more than they save; except a blocked convolution's
  // whole channel block of up to 4 registers (12, 18 or 42 channels on AVX-512, what
  // Blocker::BlockOf picks where no power of two from 4 up divides the channels): no tail,
  // LLVM splits the odd vector into register-sized pieces. The scalar loop it replaces ran
  // PP-OCR det's 1x1 convs at 160x160 48->12 in 3.6 ms (vectorized: 0.30 ms), 80x80 96->18
  // 6.1 -> 2.3 ms, 40x40 192->42 6.5 -> 1.5 ms (AVX-512, 10 trials, a busy host). (A block of
  // 24 vectorized so ran 2.5x slower than scalar: BlockOf never picks it.)
  int64_t vt = d(tile_slot_[n - 1]);
  const bool whole_axis = an_.blocked_conv && vt == shape[n - 1] && vt <= 4 * target_.vector_lanes;
  bool vec = d(vec_slot_) != 0 && vt > 1 &&
             (vt % target_.vector_lanes == 0 || (vt & (vt - 1)) == 0 || whole_axis);
  if (vec && d(tile_slot_[n - 1]) > 1) LATHE_TRY(s.Vectorize(o, inner[n - 1]));
  for (size_t a : an_.unrolled_axes) LATHE_TRY(s.Unroll(o, inner[a]));
  const std::string& tile_loop = outer_loops.back();

  // The accumulator, computed for one tile: reduce loops outside, the tile inside.
  if (!an_.acc.empty()) {
    const std::string& a = an_.acc;
    LATHE_TRY(s.ComputeAt(a, o, tile_loop));
    const Stage* as = s.FindStage(a);
    auto [spatial, reduce] = RootLoopsOf(*as);
    // Stored (n, y, x, k, block) when paired: in the output's order again.
    if (paired) spatial = {spatial[0], spatial[3], spatial[1], spatial[2], spatial[4]};
    if (chunk > 0) {
      LATHE_TRY(ApplyChunkedAccumulator(s, c, spatial, reduce));
    } else if (paired) {
      LATHE_TRY(ApplyPairedAccumulator(s, c, spatial, reduce));
    } else {
      std::vector<std::string> aorder = reduce;
      int64_t uk = d(unroll_k_slot_);
      // The innermost reduce loop unrolled whole where unroll_k does not divide it and it is at
      // most twice unroll_k (a window's 3, 5 or 7 columns against 4): split, its last part
      // would run a guarded tail whose guard is a variable in every unrolled tap. Blocked
      // depthwise 5x5 at stride 2, 144 channels at 56x56, 1 block x 7 columns (Zen 4, 2
      // threads, bench_built_kernel): AVX-512 58-60 us split by 4, 31-33 whole; AVX2 75-77 / 37-39.
      const int64_t inner_extent = reduce.empty() ? 1 : as->loops.at(reduce.back()).extent;
      const bool inner_whole =
          uk > 1 && inner_extent > 1 && inner_extent % uk != 0 && inner_extent <= 2 * uk;
      const int64_t steps = inner_whole ? inner_extent : std::max<int64_t>(uk, 1);
      // Straight-line code per reduce step: unrolled tile rows x vectors per row x unroll_k.
      // Past a few times the register file it only spills and slows the JIT down.
      // Rows are unrolled only around a vector loop: unrolled copies of scalar loops only bloat.
      bool unroll_rows = d(unroll_slot_) != 0 && vec;
      int64_t body = steps * (vec ? VectorsFor(d(tile_slot_[n - 1])) : 1);
      if (unroll_rows) {
        for (size_t i = 0; i + 1 < n; ++i) {
          if (d(tile_slot_[i]) <= 16) body *= d(tile_slot_[i]);
        }
      }
      if (body > 8 * target_.vector_registers) {
        return absl::InvalidArgumentError(
            absl::StrCat("register tile of ", body, " vector operations per step is too large"));
      }
      // Channels that share no input (plain NCHW depthwise convolutions, poolings): the
      // window's rows unrolled as well, innermost of the reduction but the columns, so that an
      // input row that several of the tile's rows read (through different window rows) is
      // loaded once. Plain depthwise, 2 channels x 4 rows x 16 columns, us (Zen 4 AVX-512, 2
      // threads, bench_built_kernel): 3x3 32 ch 112x112 66-69 -> 48-62, 5x5 240 ch 28x28
      // 107-124 -> 98, 5x5/2 144 ch 56x56 114-127 -> 93-96.
      std::string window_rows;
      if (an_.channels_private && unroll_rows && reduce.size() >= 2 && d(tile_slot_[n - 2]) > 1) {
        const int64_t ry = as->loops.at(reduce[reduce.size() - 2]).extent;
        const int64_t rx = as->loops.at(reduce.back()).extent;
        const int64_t ops = body / steps * std::min(steps, rx);
        if (UnrollsWindowLoop(ops, ry)) window_rows = reduce[reduce.size() - 2];
      }
      std::string kin = inner_whole ? reduce.back() : std::string();
      if (!inner_whole) {
        LATHE_TRY_VALUE(split_in, SplitInnermostReduce(s, a, uk, aorder));
        kin = split_in;
      }
      if (!window_rows.empty()) {
        // Innermost of the reduction but the unrolled columns (below).
        aorder.erase(std::find(aorder.begin(), aorder.end(), window_rows));
        aorder.insert(kin.empty() ? aorder.end() : aorder.end() - 1, window_rows);
      }
      aorder.insert(aorder.end(), spatial.begin(), spatial.end());
      LATHE_TRY(s.Reorder(a, aorder));
      if (!kin.empty()) LATHE_TRY(s.Unroll(a, kin));
      if (!window_rows.empty()) LATHE_TRY(s.Unroll(a, window_rows));
      if (unroll_rows) {
        for (size_t i = 0; i + 1 < spatial.size(); ++i) {
          // Extents here are nominal (the full axis); the region is one tile.
          if (d(tile_slot_[i]) > 1 && d(tile_slot_[i]) <= 16) LATHE_TRY(s.Unroll(a, spatial[i]));
        }
      }
      // A blocked convolution reading its padding inlined: the window's columns unrolled too,
      // so that each tap's padding guard is a constant per unrolled column and the products of
      // the padding drop out of the code (codegen/zero_taps.h). Conv 3x3 512->512 at 7x7, 2
      // blocks x 7 columns (Zen 4 AVX-512, 2 threads, bench_built_kernel): 870-960 us against
      // 1044-1170 with the padding copied at root, whose border taps multiply zeros (22 % of
      // the multiply-adds at 7x7).
      if (an_.blocked_conv && reduce.size() == 4 && unroll_rows && PaddingInlined(c)) {
        const int64_t rx = as->loops.at(reduce[2]).extent;
        if (UnrollsWindowLoop(body, rx)) LATHE_TRY(s.Unroll(a, reduce[2]));
      }
      if (vec && d(tile_slot_[n - 1]) > 1 && as->loops.at(spatial.back()).extent <= 1024) {
        LATHE_TRY(s.Vectorize(a, spatial.back()));
      } else if (vec && d(tile_slot_[n - 1]) > 1) {
        // Past 1024 the nominal extent (the full axis) cannot be vectorized, but the region is
        // one tile: split by the tile (the outer loop runs once) and vectorize the inner one, so
        // that a matmul with n > 1024 (BERT's FFN, a classifier over 6625 characters) keeps its
        // vector accumulator.
        LATHE_TRY_VALUE(vp, s.Split(a, spatial.back(), {d(tile_slot_[n - 1])}));
        LATHE_TRY(s.Vectorize(a, vp[1]));
      }
    }
    // Packed inputs: copied once per outer loop iteration at the chosen depth.
    for (size_t p = 0; p < pack_stages.size(); ++p) {
      if (pack_stages[p].empty()) continue;
      size_t at =
          std::min<size_t>(static_cast<size_t>(d(pack_slot_[p])) - 1, outer_loops.size() - 1);
      LATHE_TRY(s.ComputeAt(pack_stages[p], o, outer_loops[at]));
      const Stage* ps = s.FindStage(pack_stages[p]);
      std::string last = ps->root_loops.back();
      LATHE_TRY_VALUE(pp, s.Split(pack_stages[p], last, {target_.vector_lanes}));
      LATHE_TRY(s.Vectorize(pack_stages[p], pp[1]));
    }
  }
  if (!an_.dw_out.empty()) LATHE_TRY(ApplyDepthwisePart(s, c, outer_loops[0]));
  return outer_loops[0];
}

absl::Status CpuSpace::ApplyDepthwisePart(Schedule& s, const Candidate& c,
                                          const std::string& at) const {
  const std::string &dw = an_.dw_out, &acc = an_.dw_acc;
  LATHE_TRY(s.ComputeAt(dw, an_.out, at));
  // dw: (n, channel blocks, rows, columns, the block) for one row tile of every block.
  const std::vector<std::string> sp = RootLoopsOf(*s.FindStage(dw)).first;
  const int64_t cols = c.decisions[dw_cols_slot_];
  LATHE_TRY_VALUE(xs, s.Split(dw, sp[3], {cols}));
  LATHE_TRY(s.Reorder(dw, {sp[0], sp[1], sp[2], xs[0], xs[1], sp[4]}));
  if (cols > 1) LATHE_TRY(s.Unroll(dw, xs[1]));
  LATHE_TRY(s.Vectorize(dw, sp[4]));
  // Its reduction per register tile: the window outside, the columns unrolled, the block the
  // vector.
  LATHE_TRY(s.ComputeAt(acc, dw, xs[0]));
  auto [asp, ared] = RootLoopsOf(*s.FindStage(acc));
  std::vector<std::string> order = ared;
  order.insert(order.end(), asp.begin(), asp.end());
  LATHE_TRY(s.Reorder(acc, order));
  if (s.FindStage(acc)->loops.at(ared.back()).extent <= 8) LATHE_TRY(s.Unroll(acc, ared.back()));
  if (cols > 1) LATHE_TRY(s.Unroll(acc, asp[3]));
  return s.Vectorize(acc, asp[4]);
}

absl::Status CpuSpace::ApplyChunkedAccumulator(Schedule& s, const Candidate& c,
                                               const std::vector<std::string>& spatial,
                                               const std::vector<std::string>& reduce) const {
  auto d = [&](int slot) { return c.decisions[slot]; };
  const std::string& a = an_.acc;
  // spatial: n, k (channel blocks), y, x, the vector; reduce: channel blocks, ry, rx, lanes.
  LATHE_TRY_VALUE(rc, s.Split(a, reduce[0], {d(chunk_slot_)}));
  LATHE_TRY_VALUE(xs, s.Split(a, spatial[3], {d(tile_slot_[3])}));
  std::vector<std::string> order = {rc[0], spatial[0], spatial[2], xs[0],
                                    rc[1], reduce[1],  reduce[2],  reduce[3]};
  LATHE_TRY_VALUE(kin, SplitInnermostReduce(s, a, d(unroll_k_slot_), order));
  const bool paired = Paired(c);
  std::string blocks = spatial[1], vec = spatial[4];
  std::vector<std::string> kp;
  if (paired) {
    LATHE_TRY_VALUE(parts, s.Split(a, spatial[1], {PairFactor()}));
    kp = std::move(parts);
    blocks = kp[0];
  }
  order.insert(order.end(), {blocks, xs[1]});
  if (paired) order.push_back(kp[1]);
  order.push_back(spatial[4]);
  LATHE_TRY(s.Reorder(a, order));
  if (!kin.empty()) LATHE_TRY(s.Unroll(a, kin));
  if (d(tile_slot_[1]) / (paired ? PairFactor() : 1) > 1) LATHE_TRY(s.Unroll(a, blocks));
  if (d(tile_slot_[3]) > 1) LATHE_TRY(s.Unroll(a, xs[1]));
  if (paired) {
    LATHE_TRY_VALUE(fused, s.Fuse(a, {kp[1], spatial[4]}));
    vec = fused;
  }
  return s.Vectorize(a, vec);
}

absl::Status CpuSpace::ApplyPairedAccumulator(Schedule& s, const Candidate& c,
                                              const std::vector<std::string>& spatial,
                                              const std::vector<std::string>& reduce) const {
  auto d = [&](int slot) { return c.decisions[slot]; };
  const std::string& a = an_.acc;
  const int64_t pair = PairFactor();
  // spatial, as the tile slots: n, channel blocks, y, x, the block.
  const int64_t images = d(tile_slot_[0]), pairs = d(tile_slot_[1]) / pair;
  const int64_t rows = d(tile_slot_[2]), cols = d(tile_slot_[3]), uk = d(unroll_k_slot_);
  const bool unroll = d(unroll_slot_) != 0;
  int64_t body = uk * pairs;
  if (unroll) {
    for (int64_t t : {images, rows, cols}) body *= t <= 16 ? t : 1;
  }
  if (body > 8 * target_.vector_registers) {
    return absl::InvalidArgumentError(
        absl::StrCat("register tile of ", body, " vector operations per step is too large"));
  }
  LATHE_TRY_VALUE(kp, s.Split(a, spatial[1], {pair}));
  std::vector<std::string> order = reduce;
  LATHE_TRY_VALUE(kin, SplitInnermostReduce(s, a, uk, order));
  order.insert(order.end(), {spatial[0], kp[0], spatial[2], spatial[3], kp[1], spatial[4]});
  LATHE_TRY(s.Reorder(a, order));
  if (!kin.empty()) LATHE_TRY(s.Unroll(a, kin));
  if (pairs > 1) LATHE_TRY(s.Unroll(a, kp[0]));
  if (unroll) {
    const std::pair<int64_t, const std::string*> loops[] = {
        {images, &spatial[0]}, {rows, &spatial[2]}, {cols, &spatial[3]}};
    for (const auto& [t, loop] : loops) {
      if (t > 1 && t <= 16) LATHE_TRY(s.Unroll(a, *loop));
    }
  }
  LATHE_TRY_VALUE(vec, s.Fuse(a, {kp[1], spatial[4]}));
  return s.Vectorize(a, vec);
}

}  // namespace internal
}  // namespace lathe::tuner
