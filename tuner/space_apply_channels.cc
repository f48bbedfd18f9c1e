// \file
// The CPU search space's Apply for an NCHW convolution vectorized over its output channels
// (CpuSpace::ApplyChannelsInner): the accumulator and the packed input that reads the channels
// stored with them innermost, channel-vector register tiles, the packs and the output tile
// written as transposed tiles where they can be (codegen/transpose_copy.h). A depthwise one's
// channels are read by both its inputs: both are copied per channel block
// (CpuSpace::ApplyDepthwiseChannels).
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/transpose_copy.h"
#include "tuner/cpu_space.h"
#include "tuner/decisions.h"

namespace lathe::tuner {

namespace {

using ir::Schedule;
using ir::Stage;

// A channel pack copied as transposed tiles (codegen/transpose_copy.h): the channel loop
// split by the vector and its inner part vectorized, the source's innermost axes (contiguous
// elements) unrolled between the two parts, so that each unrolled copy is a gather of one
// element per channel whose first lanes run over consecutive elements. Code generation then
// loads rows of the source and transposes them in registers.
struct TransposedPack {
  std::vector<std::string> outer;     // the source's other axes, in its order
  std::string split;                  // an axis whose inner part is unrolled too ("" if none)
  int64_t factor = 1;                 // ... by this
  std::vector<std::string> unrolled;  // whole axes unrolled, in the source's order
};

// The plan for copy stage `copy` whose root loops `src` are its source's axes in order, the
// channel axis at `chan`; nothing where fewer than a quarter of `lanes` consecutive elements
// would be unrolled (code generation keeps the gathers there).
std::optional<TransposedPack> PlanTransposedPack(const Stage& copy,
                                                 const std::vector<std::string>& src, size_t chan,
                                                 int64_t lanes) {
  TransposedPack plan;
  int64_t run = 1;
  size_t i = src.size();
  for (; i > chan + 1 && run * copy.loops.at(src[i - 1]).extent <= lanes; --i) {
    run *= copy.loops.at(src[i - 1]).extent;
  }
  plan.unrolled.assign(src.begin() + static_cast<std::ptrdiff_t>(i), src.end());
  if (i > chan + 1) {
    // Part of the next axis out (a 1x1 convolution's input channels): its largest divisor
    // that keeps the run within the vector.
    const int64_t e = copy.loops.at(src[i - 1]).extent;
    for (int64_t f = lanes / run; f >= 2; --f) {
      if (e % f == 0) {
        plan.split = src[i - 1];
        plan.factor = f;
        break;
      }
    }
  }
  if (run * plan.factor * 4 < lanes) return std::nullopt;
  for (size_t a = 0; a < i; ++a) {
    if (a != chan) plan.outer.push_back(src[a]);
  }
  return plan;
}

}  // namespace

namespace internal {

absl::StatusOr<std::string> CpuSpace::ApplyChannelsInner(Schedule& s, const Candidate& c) const {
  auto d = [&](int slot) { return c.decisions[slot]; };
  const std::string& o = an_.out;
  const std::string& a = an_.acc;
  const size_t n = out_axes_.size();
  const size_t ca = static_cast<size_t>(an_.chan_axis);
  const int lanes = target_.vector_lanes;
  if (an_.cache_write) LATHE_TRY(s.CacheWrite(o, "local").status());
  // The accumulator with the channels innermost.
  auto [spatial, reduce] = RootLoopsOf(*s.FindStage(a));
  std::vector<std::string> order = spatial;
  order.erase(order.begin() + ca);
  order.push_back(spatial[ca]);
  LATHE_TRY(s.StorageOrder(a, order));
  // The input that reads the channels, packed with them innermost; other packs as decided.
  std::vector<std::string> pack_stages(an_.pack.size());
  std::vector<std::string> copy_order;       // the channel pack's copy loops, where reordered
  std::optional<TransposedPack> transposed;  // or copied as transposed tiles
  std::string chan_src;                      // the channel pack's channel loop
  for (size_t p = 0; p < an_.pack.size(); ++p) {
    const bool chan_pack = static_cast<int>(p) == an_.chan_pack;
    if (!chan_pack && d(pack_slot_[p]) == 0) continue;
    LATHE_TRY_VALUE(name, s.CacheRead(an_.pack[p], "global", {a}));
    pack_stages[p] = name;
    if (!chan_pack) continue;
    const std::vector<std::string> src = s.FindStage(name)->root_loops;  // the source's order
    std::vector<std::string> dims = src;
    std::string cd = dims[an_.chan_dim];
    dims.erase(dims.begin() + an_.chan_dim);
    dims.push_back(cd);
    LATHE_TRY(s.StorageOrder(name, dims));
    // The copy then walks the channels just inside the source's next dimension, so that each
    // step reads the short rows after it (a window, W[k][c][r][s]: r*s contiguous floats)
    // instead of one float of each channel's row (W[k][c] 18 KB apart for 512 input channels
    // of 3x3: plain conv 3x3 512->512 at 7x7, 2250-2460 us with the channels innermost,
    // 1580-1720 with them outside the window; Zen 4 AVX-512, 2 threads).
    const ir::Stage* copy = s.FindStage(name);
    const size_t next = static_cast<size_t>(an_.chan_dim) + 1;
    int64_t after = 1;
    for (size_t i = next + 1; i < src.size(); ++i) after *= copy->loops.at(src[i]).extent;
    if (after > 1) {
      copy_order = src;
      copy_order.erase(copy_order.begin() + an_.chan_dim);
      copy_order.insert(copy_order.begin() + static_cast<std::ptrdiff_t>(next), cd);
    }
    // Better: as transposed tiles, which load whole rows of the source and store whole
    // vectors (plain conv 3x3 512->512 at 7x7, 2 channel vectors x 7 columns: 1364-1398 us
    // with the scalar copy above, 1197-1250 so; Zen 4 AVX-512, 2 threads).
    transposed =
        PlanTransposedPack(*copy, src, static_cast<size_t>(an_.chan_dim), target_.vector_lanes);
    chan_src = cd;
  }

  // The output: a channel tile of whole vectors (at most four), rows and columns as decided.
  std::vector<int64_t> tile(n);
  for (size_t i = 0; i < n; ++i) tile[i] = d(tile_slot_[i]);
  tile[ca] = std::clamp<int64_t>(tile[ca] / lanes, 1, 4) * lanes;
  int64_t regs = tile[ca] / lanes;
  for (size_t i = ca + 1; i < n; ++i) regs *= tile[i];
  if (regs > std::max(1, target_.vector_registers - 4)) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel register tile of ", regs, " vectors does not fit"));
  }
  std::vector<std::string> outer, inner;
  for (size_t i = 0; i < n; ++i) {
    LATHE_TRY_VALUE(parts, s.Split(o, out_axes_[i], {tile[i]}));
    outer.push_back(parts[0]);
    inner.push_back(parts[1]);
  }
  // The tile written out from the accumulator (channels innermost) as transposed tiles
  // (codegen/transpose_copy.h) where its columns are a power of two up to a vector that divides
  // the row: the columns vectorized, the channels unrolled just outside them, so that code
  // generation loads each column's channels and transposes them in registers instead of storing
  // one float at a time (plain 1x1 64->256 + bias + relu at 56x56, 2 channel vectors x 8
  // columns: 703 us so, 500-542 transposed; Zen 4 AVX-512, 2 threads).
  const int64_t cols = tile[n - 1];
  const bool transposed_out =
      ca + 1 < n && cols >= 4 && cols <= lanes && (cols & (cols - 1)) == 0 &&
      workload_->output()->shape[n - 1] % cols == 0 && tile[ca] <= codegen::kMaxTransposedColumns;
  std::vector<std::string> oorder = outer;
  for (size_t i = 0; i < n; ++i) {
    if (!transposed_out || (i != ca && i + 1 != n)) oorder.push_back(inner[i]);
  }
  if (transposed_out) oorder.insert(oorder.end(), {inner[ca], inner[n - 1]});
  LATHE_TRY(s.Reorder(o, oorder));
  if (transposed_out) {
    LATHE_TRY(s.Unroll(o, inner[ca]));
    LATHE_TRY(s.Vectorize(o, inner[n - 1]));
  }
  // Parallel over the loops down to the channel tiles at most: the packed weights of a
  // channel tile are copied once per iteration of that loop.
  const size_t depth = std::clamp<size_t>(static_cast<size_t>(d(parallel_slot_)), 1, ca + 1);
  std::string par = outer[0];
  if (depth >= 2) {
    LATHE_TRY_VALUE(fused,
                    s.Fuse(o, std::vector<std::string>(outer.begin(), outer.begin() + depth)));
    par = fused;
  }
  LATHE_TRY(s.Parallel(o, par));

  // The accumulator per output tile: reduce loops outside, the channel vectors innermost.
  LATHE_TRY(s.ComputeAt(a, o, outer.back()));
  // Mode 2: the input channels (the first reduce loop) split by kChanUnroll, the inner part
  // innermost of the reduction and unrolled. Each step then broadcasts kChanUnroll inputs of
  // different channels at one pixel, where unrolling the kernel's columns broadcasts inputs
  // that neighbouring columns share: LLVM keeps those live across the unrolled copies, and a
  // 4-vector x 6-column tile spills (plain conv 3x3 128->128 at 28x28, AVX-512: 4 x 6 with
  // channels unrolled 1090-1470 us, with columns unrolled 1530; the 2 x 4 tile 1330-1370,
  // the blocked layout's 930-1250).
  const bool split_channels = d(chan_slot_) == 2;
  if (split_channels) {
    const int64_t channels = reduce.empty() || reduce[0].rfind("rc", 0) != 0
                                 ? 0
                                 : s.FindStage(a)->loops.at(reduce[0]).extent;
    if (channels <= kChanUnroll || channels % kChanUnroll != 0) {
      return absl::InvalidArgumentError("no input-channel reduce loop to split");
    }
    LATHE_TRY_VALUE(parts, s.Split(a, reduce[0], {kChanUnroll}));
    reduce[0] = parts[0];
    reduce.push_back(parts[1]);
  }
  std::vector<std::string> aorder = reduce;
  for (size_t i = 0; i < n; ++i) {
    if (i != ca) aorder.push_back(spatial[i]);
  }
  aorder.push_back(spatial[ca]);
  LATHE_TRY(s.Reorder(a, aorder));
  LATHE_TRY(s.Vectorize(a, spatial[ca]));
  if (d(unroll_slot_) != 0) {
    for (size_t i = ca + 1; i < n; ++i) {
      if (tile[i] > 1) LATHE_TRY(s.Unroll(a, spatial[i]));
    }
  }
  // The innermost reduce loop (the kernel's columns, or mode 2's input channels) unrolled
  // whole when it is short.
  if ((split_channels || d(unroll_k_slot_) > 1) && !reduce.empty() &&
      s.FindStage(a)->loops.at(reduce.back()).extent <= 8) {
    LATHE_TRY(s.Unroll(a, reduce.back()));
  }
  for (size_t p = 0; p < pack_stages.size(); ++p) {
    if (pack_stages[p].empty()) continue;
    if (static_cast<int>(p) == an_.chan_pack) {
      const std::string& pk = pack_stages[p];
      LATHE_TRY(s.ComputeAt(pk, o, par));
      // Transposed tiles where each channel tile is whole vectors of the channels (no partial
      // tile, whose guarded stores code generation would not transpose).
      const int64_t channels = workload_->output()->shape[ca];
      if (transposed && channels % lanes == 0 &&
          (channels % tile[ca] == 0 || channels <= tile[ca])) {
        LATHE_TRY_VALUE(kp, s.Split(pk, chan_src, {lanes}));
        // One vector of channels after the other, outermost: each block reads `lanes` rows of
        // the source at once (two blocks' 32 rows at once ran conv 3x3 512->512 at 7x7 in
        // 1180-1190 us, a block at a time 995; Zen 4 AVX-512, 2 threads).
        std::vector<std::string> corder = {kp[0]};
        corder.insert(corder.end(), transposed->outer.begin(), transposed->outer.end());
        std::vector<std::string> unrolled = transposed->unrolled;
        if (transposed->factor > 1) {
          LATHE_TRY_VALUE(sp, s.Split(pk, transposed->split, {transposed->factor}));
          std::replace(corder.begin(), corder.end(), transposed->split, sp[0]);
          unrolled.insert(unrolled.begin(), sp[1]);
        }
        corder.insert(corder.end(), unrolled.begin(), unrolled.end());
        corder.push_back(kp[1]);
        LATHE_TRY(s.Reorder(pk, corder));
        for (const std::string& u : unrolled) LATHE_TRY(s.Unroll(pk, u));
        LATHE_TRY(s.Vectorize(pk, kp[1]));
      } else if (!copy_order.empty()) {
        LATHE_TRY(s.Reorder(pk, copy_order));
      }
      continue;
    }
    size_t at = std::min<size_t>(static_cast<size_t>(d(pack_slot_[p])) - 1, outer.size() - 1);
    LATHE_TRY(s.ComputeAt(pack_stages[p], o, at < depth ? par : outer[at]));
  }
  return par;
}

absl::StatusOr<std::string> CpuSpace::ApplyDepthwiseChannels(Schedule& s,
                                                             const Candidate& c) const {
  auto d = [&](int slot) { return c.decisions[slot]; };
  const std::string& o = an_.out;
  const std::string& a = an_.acc;
  const int64_t lanes = target_.vector_lanes;
  const std::vector<int64_t>& shape = workload_->output()->shape;  // n, k, oh, ow
  // The register tile: rows x columns of channel vectors, the columns a power of two of at
  // least 4 that divides the row (the output tile is written transposed, column vectors).
  const int64_t rows = d(tile_slot_[2]), cols = d(tile_slot_[3]);
  // (A grouped conv's tile may leave a tail of columns: its multiply-adds over a group's
  // channels outweigh the tail's guarded copy. RegNet's 3x3 160 ch / 10 groups at 14x14, us:
  // 8 columns 51, 4 columns 62, the blocked layout's kernel 37.)
  if (cols < 4 || cols > lanes || (cols & (cols - 1)) != 0 ||
      (shape[3] % cols != 0 && an_.group_out == 0) || out_axes_.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel-vector depthwise tile of ", cols, " columns"));
  }
  // The tile's output channels: one vector, or a grouped conv's group (one or two vectors).
  const int64_t chans = an_.group_out > 0 ? an_.group_out : lanes;
  if (const int64_t vectors = rows * cols * (chans / lanes);
      vectors > std::max(1, target_.vector_registers - 4)) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel-vector depthwise tile of ", vectors, " vectors does not fit"));
  }
  if (an_.cache_write) LATHE_TRY(s.CacheWrite(o, "local").status());
  // The input and the weights copied per block of channels with the channels innermost; the
  // padding inlined into the input's copy (each column's gather masked by its bounds, which
  // code generation reads as masked rows: codegen/transpose_copy.h).
  std::string weights = "W";  // conv2d's weights; X is packed too where no padding stage reads it
  for (const std::string& p : an_.pack) {
    if (p != an_.dw_input) weights = p;
  }
  LATHE_TRY_VALUE(in, s.CacheRead(an_.dw_input, "global", {a}));
  LATHE_TRY_VALUE(wp, s.CacheRead(weights, "global", {a}));
  if (!an_.pad_stages.empty() && d(pad_slot_[0]) == 0) {
    LATHE_TRY(s.ComputeInline(an_.pad_stages[0]));
  }
  const std::vector<std::string> il = s.FindStage(in)->root_loops;  // n, c, h, w
  const std::vector<std::string> wl = s.FindStage(wp)->root_loops;  // k, 1, r, s
  if (il.size() != 4 || wl.size() != 4) {
    return absl::InvalidArgumentError("depthwise copies of other than 4 dimensions");
  }
  LATHE_TRY(s.StorageOrder(in, {il[0], il[2], il[3], il[1]}));
  LATHE_TRY(s.StorageOrder(wp, {wl[1], wl[2], wl[3], wl[0]}));
  {
    const std::vector<std::string> sp = RootLoopsOf(*s.FindStage(a)).first;
    LATHE_TRY(s.StorageOrder(a, {sp[0], sp[2], sp[3], sp[1]}));
  }
  auto [spatial, reduce] = RootLoopsOf(*s.FindStage(a));  // n, y, x, k; rc, ry, rx

  // The output: images x channel blocks in parallel, then rows and columns of the tile; the
  // tile written with its columns vectorized and its channels unrolled around them.
  const std::vector<int64_t> tile = {1, chans, rows, cols};
  std::vector<std::string> outer, inner;
  for (size_t i = 0; i < 4; ++i) {
    LATHE_TRY_VALUE(parts, s.Split(o, out_axes_[i], {tile[i]}));
    outer.push_back(parts[0]);
    inner.push_back(parts[1]);
  }
  LATHE_TRY(s.Reorder(
      o, {outer[0], outer[1], outer[2], outer[3], inner[0], inner[2], inner[1], inner[3]}));
  LATHE_TRY_VALUE(par, s.Fuse(o, {outer[0], outer[1]}));
  LATHE_TRY(s.Parallel(o, par));
  LATHE_TRY(s.Unroll(o, inner[1]));
  LATHE_TRY(s.Vectorize(o, inner[3]));

  // The accumulator per tile: the window outside, its columns unrolled, the tile unrolled
  // around the channel vector.
  LATHE_TRY(s.ComputeAt(a, o, outer[3]));
  std::vector<std::string> aorder = reduce;
  aorder.insert(aorder.end(), spatial.begin(), spatial.end());
  LATHE_TRY(s.Reorder(a, aorder));
  if (!reduce.empty()) LATHE_TRY(s.Unroll(a, reduce.back()));
  if (rows > 1) LATHE_TRY(s.Unroll(a, spatial[1]));
  LATHE_TRY(s.Unroll(a, spatial[2]));
  LATHE_TRY(s.Vectorize(a, spatial[3]));

  // The copies per channel block: the input as transposed tiles (its channel loop split by
  // the vector, its columns by the vector and unrolled between the parts), the weights as
  // channel vectors (a few hundred floats).
  LATHE_TRY(s.ComputeAt(in, o, par));
  LATHE_TRY_VALUE(ic, s.Split(in, il[1], {lanes}));
  LATHE_TRY_VALUE(ix, s.Split(in, il[3], {lanes}));
  LATHE_TRY(s.Reorder(in, {ic[0], il[0], il[2], ix[0], ix[1], ic[1]}));
  LATHE_TRY(s.Unroll(in, ix[1]));
  LATHE_TRY(s.Vectorize(in, ic[1]));
  LATHE_TRY(s.ComputeAt(wp, o, par));
  LATHE_TRY_VALUE(wk, s.Split(wp, wl[0], {lanes}));
  LATHE_TRY(s.Vectorize(wp, wk[1]));
  return par;
}

}  // namespace internal
}  // namespace lathe::tuner
