// \file
// Internal to tuner/: the CPU search space's class, shared by its two halves. space.cc holds
// the structure of a workload's space (analysis, decision slots, Apply, sampling, mutation,
// traces); space_rules.cc runs the rules of cpu_rules/ (one per file), the candidates that what
// is known about the target picks without measuring (SearchSpace::Heuristic). Nothing outside
// tuner/ includes this header: use tuner/space.h.
#ifndef LATHE_TUNER_CPU_SPACE_H_
#define LATHE_TUNER_CPU_SPACE_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ir/ops.h"
#include "ir/schedule.h"
#include "ir/workload.h"
#include "tuner/space.h"

namespace lathe::tuner::internal {

using ir::Schedule;
using ir::Stage;

// One decision: its name (for logs) and the values it may take.
struct Slot {
  std::string name;
  std::vector<int64_t> choices;
};

// The most bytes a chunked convolution's output tile may take (ApplyTiles): it is read and
// written once per chunk of the reduction and should stay in the L1 cache (32-48 KiB on
// current x86 cores).
constexpr int64_t kMaxChunkedTileBytes = 32 * 1024;
// Vector operations per reduce step up to which a blocked convolution with its padding inlined
// also unrolls the window's columns (ApplyTiles): 4 blocks x 6 columns x 4 lanes x 3 taps.
constexpr int64_t kMaxUnrolledWindowOps = 288;
// Whether a register tile of `ops` vector operations a reduce step unrolls a window loop of
// `extent` around them as well: its columns (ApplyTiles; the blocked rule puts an inlined
// padding first where it does), or the rows of a tile of channels that share no input.
inline bool UnrollsWindowLoop(int64_t ops, int64_t extent) {
  return extent > 1 && ops * extent <= kMaxUnrolledWindowOps;
}

// The most weight bytes a register-tiled convolution's channel tile may read where several
// pixel tiles pass over them: they should stay in the L2 cache between the passes (5/8 of the
// 1 MiB L2 of the smallest AVX-512 cores, Skylake-SP and Zen 4; Ice Lake has 1.25, Sapphire
// Rapids 2), leaving room for the input rows each pass streams. Also the most of a panel
// matmul's A that every panel's task may re-read from L2 (panel_matmul.cc).
constexpr int64_t kMaxTileWeightBytes = 640 * 1024;

// An NCHW convolution vectorized over its output channels (the channels mode 2): its input
// channels split by this, the inner part innermost of the reduction and unrolled.
constexpr int64_t kChanUnroll = 4;

// A stage's root loops: the spatial ones (one per axis), then the reduce ones.
std::pair<std::vector<std::string>, std::vector<std::string>> RootLoopsOf(const ir::Stage& st);

// The convolution whose output a workload's tiles cover: a conv2d's parameters, a
// sepconv2d's 1x1 part.
absl::StatusOr<ir::Conv2dParams> BlockedConvParams(const ir::WorkloadSpec& spec);
// The convolution whose input a workload pads: a conv2d's, a sepconv2d's depthwise part.
absl::StatusOr<ir::Conv2dParams> PaddedConvParams(const ir::WorkloadSpec& spec);

// The structure of a workload that the sketch rules found.
struct Analysis {
  std::vector<std::string> inline_stages;  // injective, not the output
  std::vector<std::string> pad_stages;     // paddings: inlined, or computed once at root
  std::string out;                         // the output stage (tiled, parallel)
  std::string acc;                         // its accumulator: a reduction computed at the tile
  bool cache_write = false;                // acc is created by cache_write(out, local)
  std::vector<std::string> side;           // other stages, consumers first (compute_at or root)
  std::vector<std::string> pack;           // inputs of acc worth packing
  // Extents of the accumulation's reduce axes, outermost first (a convolution's input channels,
  // then its window rows and columns); empty without a reduction.
  std::vector<int64_t> reduce_extents;
  // Per packed input: its innermost index moves with the output's innermost axis (B of a
  // matmul), so a tile walking along that axis reads a panel worth packing.
  std::vector<bool> pack_walks_inner;
  // A non-innermost output axis that the accumulator can be vectorized over instead (the
  // output channels of an NCHW convolution): -1 when there is none. Only one packed input
  // reads it, as the plain index of its dimension `chan_dim`; nothing else depends on it.
  int chan_axis = -1;
  int chan_pack = -1;  // index into `pack`
  int chan_dim = -1;
  // Every input of the accumulation reads the output's third axis from the end (a plain NCHW
  // depthwise convolution's or pooling's channels, [n, c, y, x]): channels of one tile share
  // no input, so a register tile gains nothing from several of them.
  bool channels_private = false;
  // A convolution in a blocked layout (nchw{x}c): its innermost output axis is the block of
  // output channels, already the vector axis; the register tile is output columns (and a few
  // rows or channel blocks) x that vector.
  bool blocked_conv = false;
  // ... and a dense one (one group): every input channel block feeds every output channel.
  bool dense_blocked_conv = false;
  // ... whose input is plain NCHW (a model's first layer, layout=nchw with a kblock).
  bool plain_input_conv = false;
  // A matmul whose B comes in column panels (bpanel, packed once by the model compiler): the
  // output's innermost axis is a panel's columns, which B holds contiguously for every k.
  bool panel_matmul = false;
  // A separable convolution (sepconv2d): the epilogue stage and the reduction of its depthwise
  // part, computed per row tile of the 1x1 part, whose rows are the outer parallel loop
  // (ApplyDepthwisePart); empty otherwise. The 1x1 part is the blocked conv above.
  std::string dw_out, dw_acc;
  // A plain NCHW depthwise convolution (one channel per group, no dilation, whole vectors of
  // channels): its input as the accumulation reads it, the padding stage or X; empty
  // otherwise. Offers ApplyDepthwiseChannels. Also a plain grouped convolution whose groups
  // are one or two vectors of output channels and whole vectors of input channels: each tile
  // of a group's channels then reads its group's input channels, copied as one block.
  std::string dw_input;
  // That grouped convolution's output channels a group (one tile); 0 otherwise.
  int64_t group_out = 0;
  // Output axes tiled whole and unrolled: the positions of a winograd transform
  // (winograd_in: e1, e2; winograd_out: vy, vx), whose cases (ir/ops_winograd.cc) code
  // generation can only tell apart where the position is a constant.
  std::vector<size_t> unrolled_axes;
};

class CpuSpace : public SearchSpace {
 public:
  CpuSpace(ir::Workload w, CpuTarget t)
      : workload_(std::make_shared<const ir::Workload>(std::move(w))), target_(t) {}

  absl::Status Init();
  const ir::Workload& workload() const override { return *workload_; }
  int num_sketches() const override { return 1; }
  absl::StatusOr<Schedule> Apply(const Candidate& c) const override;
  absl::StatusOr<Candidate> Sample(std::mt19937_64& rng) const override;
  using SearchSpace::Mutate;
  absl::StatusOr<Candidate> Mutate(const Candidate& c, std::mt19937_64& rng,
                                   const KnownCandidates* known) const override;
  absl::StatusOr<Candidate> FromTrace(const ir::Trace& trace) const override;
  std::vector<Candidate> Heuristic(int max) const override;
  absl::StatusOr<Candidate> FromDecisions(int sketch,
                                          const std::vector<int64_t>& decisions) const override {
    if (sketch < 0 || sketch >= num_sketches()) {
      return absl::InvalidArgumentError(absl::StrCat("no sketch ", sketch, " in this space"));
    }
    Candidate c;
    c.sketch = sketch;
    c.decisions = decisions;
    if (c.decisions.size() < slots_.size()) c.decisions.resize(slots_.size(), 0);  // see FromTrace
    return Finish(std::move(c));
  }

 private:
  friend class RuleContext;  // the rules (tuner/cpu_rules/) read the slots and the analysis
  int AddSlot(std::string name, std::vector<int64_t> choices) {
    slots_.push_back({std::move(name), std::move(choices)});
    return static_cast<int>(slots_.size()) - 1;
  }
  absl::StatusOr<Candidate> Finish(Candidate c) const {
    Canonicalize(c.decisions);
    auto s = Apply(c);
    if (!s.ok()) return s.status();
    c.trace = s->trace();
    c.schedule = std::make_shared<const Schedule>(std::move(*s));
    c.trace.sketch = c.sketch;
    c.trace.decisions = c.decisions;
    return c;
  }

  std::shared_ptr<const ir::Workload> workload_;  // shared by every replayed schedule
  CpuTarget target_;
  Analysis an_;
  std::vector<Slot> slots_;
  // The choice of `slot` nearest to `want` (the smaller one on a tie).
  int64_t Nearest(int slot, int64_t want) const {
    const auto& ch = slots_[slot].choices;
    int64_t best = ch.front();
    for (int64_t c : ch) {
      if (std::llabs(c - want) < std::llabs(best - want)) best = c;
    }
    return best;
  }

  // Slot indices.
  std::vector<std::string> out_axes_;
  std::vector<int> tile_slot_;  // per output axis
  int parallel_slot_ = -1;      // how many outer loops to fuse into the parallel loop
  int swap_slot_ = -1;          // swap the two innermost outer loops
  int vec_slot_ = -1;           // vectorize the innermost tile loops
  int unroll_slot_ = -1;        // unroll the accumulator's outer spatial tile loops
  int unroll_k_slot_ = -1;      // unroll factor of the innermost reduce loop
  std::vector<int> pack_slot_;  // per packed input: 0 = no, else outer loop depth + 1
  std::vector<int> side_slot_;  // per side stage: 0 = root, 1 = at the first outer loop
  std::vector<int> pad_slot_;   // per padding: 0 = inline, 1 = root
  // Per padding: multiply-adds of the workload per padded element (how often a copy at root
  // would be read): a depthwise 3x3 convolution 9 (2.25 at stride 2), a dense one hundreds.
  std::vector<double> pad_reuse_;
  // Per side stage: 0, or the factor of an rfactor of its reduce axis (vector partial sums),
  // offered where the spatial extent is small; -1 where not offered. These slots come last
  // so that traces from before they existed still map to decisions (FromTrace pads with 0).
  std::vector<int> rfactor_slot_;
  // 1: vectorize the accumulator over Analysis::chan_axis (ApplyChannelsInner); -1 when the
  // workload has no such axis.
  int chan_slot_ = -1;
  // Dense blocked convolutions: 0, or how many input-channel blocks one chunk of the reduction
  // covers when the accumulator tile is an L1-resident block of whole output rows (see
  // ApplyTiles); -1 where not offered.
  int chunk_slot_ = -1;
  // Blocked convolutions whose channel block is narrower than a vector (8 channels on
  // AVX-512): 1 = PairFactor() blocks side by side in one vector register (ApplyTiles); -1
  // where not offered.
  int pair_slot_ = -1;
  // sepconv2d: the output columns of the depthwise part's register tile (its accumulator
  // holds one vector per column); -1 otherwise.
  int dw_cols_slot_ = -1;
  // Plain depthwise convolutions: 1 = vectorized over the channels (ApplyDepthwiseChannels);
  // -1 where not offered.
  int dw_chan_slot_ = -1;
  // Channel blocks per vector register: lanes / block (2 for 8-channel blocks on AVX-512).
  int64_t PairFactor() const { return target_.vector_lanes / workload_->output()->shape.back(); }
  bool Paired(const Candidate& c) const { return pair_slot_ >= 0 && c.decisions[pair_slot_] != 0; }
  // Whether `c` computes a padding inlined into its reader.
  bool PaddingInlined(const Candidate& c) const {
    for (int slot : pad_slot_) {
      if (c.decisions[slot] == 0) return true;
    }
    return false;
  }
  // Vector registers that `elems` contiguous floats take.
  int64_t VectorsFor(int64_t elems) const {
    return (elems + target_.vector_lanes - 1) / target_.vector_lanes;
  }
  // Bytes of a chunked convolution's output tile: images x channel blocks x rows x the whole
  // width x the channel block.
  int64_t ChunkedTileBytes(int64_t images, int64_t blocks, int64_t rows) const {
    const std::vector<int64_t>& shape = workload_->output()->shape;
    return images * blocks * rows * shape[3] * shape[4] * static_cast<int64_t>(sizeof(float));
  }
  // Decisions as Apply reads them: slots that a chunked candidate does not read are set to
  // their first choice, so that one program has one decision vector. Whether any was reset.
  bool Canonicalize(std::vector<int64_t>& d) const;
  // Canonicalize for every slot but pair_blocks (which Canonicalize resets first).
  bool CanonicalizeUnpaired(std::vector<int64_t>& d) const;

  void FindChannelAxis(const Stage& acc_def);
  // The output and its accumulator when the accumulator is vectorized over the channel axis:
  // the accumulator and the packed input that reads the channels are stored with the channels
  // innermost (Schedule::StorageOrder), the output is tiled with a channel tile of whole
  // vectors, and the accumulator tile keeps (channel vectors x rows x columns) registers.
  // Returns the outermost (parallel) loop of the output.
  absl::StatusOr<std::string> ApplyChannelsInner(Schedule& s, const Candidate& c) const;
  // The output and its accumulator otherwise: tiles with the innermost output axis as the
  // vector axis, packed inputs as decided. Returns the outermost (parallel) loop.
  absl::StatusOr<std::string> ApplyTiles(Schedule& s, const Candidate& c) const;
  // A plain NCHW depthwise convolution over vectors of channels (dw_chan_slot_): each parallel
  // channel block's input and weights copied with the channels innermost (the input's padding
  // inlined into its copy, code generation transposing rows in registers), the accumulator tile
  // (rows x columns of channel vectors) as a blocked layout's, the output tile written back
  // transposed. Returns the outermost (parallel) loop of the output.
  absl::StatusOr<std::string> ApplyDepthwiseChannels(Schedule& s, const Candidate& c) const;
  // A sepconv2d's depthwise part computed inside the output's parallel loop `at` (one tile of
  // rows of every channel): register tiles of dw_cols columns x the channel block, the window
  // unrolled around them.
  absl::Status ApplyDepthwisePart(Schedule& s, const Candidate& c, const std::string& at) const;
  // ApplyTiles' accumulator of a chunked candidate (computed at the output tile already):
  // chunk loop outermost, then the tile's rows and register tiles, the chunk's reduction, and
  // the register tile (channel blocks x columns x the vector) unrolled innermost.
  absl::Status ApplyChunkedAccumulator(Schedule& s, const Candidate& c,
                                       const std::vector<std::string>& spatial,
                                       const std::vector<std::string>& reduce) const;
  // ApplyTiles' accumulator of a paired candidate (stored (images, rows, columns, channel
  // blocks, block), computed at the output tile): the reduction outside, then the register
  // tile, whose innermost loop fuses PairFactor() channel blocks with the block into one
  // vector. Its weights are read as one run of the block per channel block.
  absl::Status ApplyPairedAccumulator(Schedule& s, const Candidate& c,
                                      const std::vector<std::string>& spatial,
                                      const std::vector<std::string>& reduce) const;
};

}  // namespace lathe::tuner::internal

#endif  // LATHE_TUNER_CPU_SPACE_H_
