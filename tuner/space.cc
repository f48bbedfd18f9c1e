#include "tuner/space.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/host.h"
#include "ir/functor.h"
#include "ir/ops.h"
#include "tuner/decisions.h"

namespace lathe::tuner {

namespace {

using ir::Schedule;
using ir::Stage;

// One decision: its name (for logs) and the values it may take.
struct Slot {
  std::string name;
  std::vector<int64_t> choices;
};

// Candidate tile sizes for a loop of extent `e`: small values, multiples of the vector width,
// and the extent itself when small; capped so that register tiles stay plausible.
// Divisors of the extent come first: a tile that does not divide its loop needs guards in
// the innermost body. Extents with few divisors (primes) also get a few powers of two.
std::vector<int64_t> TileChoices(int64_t e, int lanes, int64_t cap, bool inner) {
  std::set<int64_t> c;
  for (int64_t d = 1; d <= std::min<int64_t>(e, cap); ++d) {
    if (e % d == 0) c.insert(d);
  }
  if (c.size() < 4) c.insert({2, 4, 8, 16});
  // Row counts of register micro-kernels (6x16 on AVX2) rarely divide the extent.
  if (!inner) c.insert({3, 4, 5, 6, 8});
  if (inner) {
    for (int m = 1; m <= 8; ++m) c.insert(static_cast<int64_t>(m) * lanes);
  }
  std::vector<int64_t> out;
  for (int64_t v : c) {
    if (v <= e && v <= cap) out.push_back(v);
  }
  if (out.empty()) out.push_back(1);
  return out;
}

// The most bytes a chunked convolution's output tile may take (ApplyTiles): it is read and
// written once per chunk of the reduction and should stay in the L1 cache (32-48 KiB on
// current x86 cores).
constexpr int64_t kMaxChunkedTileBytes = 32 * 1024;

// A stage's root loops: the spatial ones (one per axis), then the reduce ones.
std::pair<std::vector<std::string>, std::vector<std::string>> RootLoopsOf(const Stage& st) {
  const auto mid = st.root_loops.begin() + static_cast<std::ptrdiff_t>(st.tensor->axes.size());
  return {std::vector<std::string>(st.root_loops.begin(), mid),
          std::vector<std::string>(mid, st.root_loops.end())};
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

// The structure of a workload that the sketch rules found.
struct Analysis {
  std::vector<std::string> inline_stages;  // injective, not the output
  std::vector<std::string> pad_stages;     // paddings: inlined, or computed once at root
  std::string out;                         // the output stage (tiled, parallel)
  std::string acc;                         // its accumulator: a reduction computed at the tile
  bool cache_write = false;                // acc is created by cache_write(out, local)
  std::vector<std::string> side;           // other stages, consumers first (compute_at or root)
  std::vector<std::string> pack;           // inputs of acc worth packing
  // Per packed input: its innermost index moves with the output's innermost axis (B of a
  // matmul), so a tile walking along that axis reads a panel worth packing.
  std::vector<bool> pack_walks_inner;
  // A non-innermost output axis that the accumulator can be vectorized over instead (the
  // output channels of an NCHW convolution): -1 when there is none. Only one packed input
  // reads it, as the plain index of its dimension `chan_dim`; nothing else depends on it.
  int chan_axis = -1;
  int chan_pack = -1;  // index into `pack`
  int chan_dim = -1;
  // A convolution in a blocked layout (nchw{x}c): its innermost output axis is the block of
  // output channels, already the vector axis; the register tile is output columns (and a few
  // rows or channel blocks) x that vector.
  bool blocked_conv = false;
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
  // Decisions as Apply reads them: slots that a chunked candidate does not read are set to
  // their first choice, so that one program has one decision vector.
  void Canonicalize(std::vector<int64_t>& d) const;

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
  // ApplyTiles' accumulator of a chunked candidate (computed at the output tile already):
  // chunk loop outermost, then the tile's rows and register tiles, the chunk's reduction, and
  // the register tile (channel blocks x columns x the vector) unrolled innermost.
  absl::Status ApplyChunkedAccumulator(Schedule& s, const Candidate& c,
                                       const std::vector<std::string>& spatial,
                                       const std::vector<std::string>& reduce) const;
};

absl::Status CpuSpace::Init() {
  Schedule sch(workload_);
  const auto& stages = sch.stages();
  const Stage* out = nullptr;
  for (const Stage& s : stages) {
    if (s.is_output) out = &s;
  }
  if (!out) return absl::InternalError("workload has no output stage");
  an_.out = out->name;
  // The accumulator: the output itself when it reduces, else a reduction of the same shape
  // that only the output reads (a fused epilogue).
  if (out->tensor->is_reduction()) {
    an_.acc = out->name + ".local";
    an_.cache_write = true;
  } else {
    for (const Stage& s : stages) {
      if (!s.tensor->is_reduction() || s.tensor->shape != out->tensor->shape) continue;
      auto consumers = sch.Consumers(s.name);
      if (consumers.size() == 1 && consumers[0] == out->name) an_.acc = s.name;
    }
  }
  for (auto it = stages.rbegin(); it != stages.rend(); ++it) {
    const Stage& s = *it;
    if (s.is_output || s.name == an_.acc) continue;
    if (!s.tensor->is_reduction()) {
      if (s.tensor->tag == "pad") {
        an_.pad_stages.push_back(s.name);
        continue;
      }
      an_.inline_stages.push_back(s.name);
    } else {
      an_.side.push_back(s.name);
    }
  }
  // Inputs of the accumulator with two or more dimensions are packing candidates.
  const Stage* acc_def =
      an_.cache_write ? out : (an_.acc.empty() ? nullptr : sch.FindStage(an_.acc));
  if (acc_def) {
    for (const std::string& t : ir::ReadTensors(acc_def->tensor->body)) {
      const ir::Tensor* tt = workload_->Find(t);
      if (tt && (*tt)->is_placeholder() && (*tt)->shape.size() >= 2) an_.pack.push_back(t);
    }
    an_.pack_walks_inner.assign(an_.pack.size(), false);
    const ir::Expr& inner_var = acc_def->tensor->axes.back()->var;
    ir::Visit(acc_def->tensor->body, [&](const ir::Expr& x) {
      if (x->kind != ir::ExprKind::kTensorRead || x->operands.empty()) return;
      for (size_t p = 0; p < an_.pack.size(); ++p) {
        if (an_.pack[p] == x->name && ir::UsesVar(x->operands.back(), inner_var.get())) {
          an_.pack_walks_inner[p] = true;
        }
      }
    });
  }

  if (workload_->spec.op == "conv2d") {
    absl::StatusOr<ir::Conv2dParams> p = ir::GetConv2dParams(workload_->spec);
    an_.blocked_conv = p.ok() && p->blocked();
  }
  // A blocked convolution's channels are innermost already: no channel-vector alternative.
  if (acc_def && acc_def->tensor->axes.size() >= 3 && !an_.blocked_conv) {
    FindChannelAxis(*acc_def);
  }
  out_axes_ = std::vector<std::string>(out->root_loops.begin(),
                                       out->root_loops.begin() + out->tensor->axes.size());
  int lanes = target_.vector_lanes;
  for (size_t a = 0; a < out_axes_.size(); ++a) {
    int64_t e = out->tensor->shape[a];
    bool inner = a + 1 == out_axes_.size();
    tile_slot_.push_back(
        AddSlot("tile." + out_axes_[a],
                TileChoices(e, lanes, inner ? 64 : std::max(32, 4 * lanes), inner)));
  }
  std::vector<int64_t> par;
  for (size_t p = 1; p <= out_axes_.size(); ++p) par.push_back(static_cast<int64_t>(p));
  parallel_slot_ = AddSlot("parallel_depth", par);
  swap_slot_ = AddSlot(
      "swap_outer", out_axes_.size() >= 2 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0});
  vec_slot_ = AddSlot("vectorize", {1, 1, 0});
  unroll_slot_ = AddSlot("unroll", {1, 0});
  unroll_k_slot_ = AddSlot(
      "unroll_k", an_.acc.empty() ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 2, 4, 8});
  for (const std::string& t : an_.pack) {
    std::vector<int64_t> depth = {0};
    for (size_t d = 1; d <= out_axes_.size(); ++d) depth.push_back(static_cast<int64_t>(d));
    pack_slot_.push_back(AddSlot("pack." + t, depth));
  }
  for (const std::string& s : an_.side) side_slot_.push_back(AddSlot("at." + s, {0, 1}));
  for (const std::string& s : an_.pad_stages) pad_slot_.push_back(AddSlot("root." + s, {0, 1}));
  // Row reductions over long rows: split the reduce axis into vector-wide partial results
  // (few rows: the only vector loop there is; many: each row's sum stays a vector).
  for (const std::string& st : an_.side) {
    const auto& raxes = sch.FindStage(st)->tensor->body->reduce_axes;
    if (raxes.size() == 1 && raxes[0]->extent >= 4 * lanes) {
      rfactor_slot_.push_back(
          AddSlot("rfactor." + st, {0, lanes, 2 * static_cast<int64_t>(lanes)}));
    } else {
      rfactor_slot_.push_back(-1);
    }
  }
  // Last, so that traces from before it existed still map to decisions (FromTrace pads 0).
  if (an_.chan_axis >= 0) chan_slot_ = AddSlot("vectorize." + out_axes_[an_.chan_axis], {0, 1});
  // A dense blocked convolution can chunk its input-channel blocks (the first reduce loop):
  // chunk sizes that divide them, below the whole.
  if (an_.blocked_conv && out_axes_.size() == 5 && !an_.acc.empty()) {
    absl::StatusOr<ir::Conv2dParams> p = ir::GetConv2dParams(workload_->spec);
    const Stage* as = an_.cache_write ? out : sch.FindStage(an_.acc);
    const std::vector<std::string> reduce = RootLoopsOf(*as).second;
    if (p.ok() && !p->depthwise() && p->groups == 1 && reduce.size() == 4) {
      const int64_t blocks = as->loops.at(reduce[0]).extent;
      std::vector<int64_t> chunks = {0};
      for (int64_t b : {1, 2, 4, 8}) {
        if (b < blocks && blocks % b == 0) chunks.push_back(b);
      }
      if (chunks.size() > 1) chunk_slot_ = AddSlot("chunk." + reduce[0], chunks);
    }
  }
  return absl::OkStatus();
}

void CpuSpace::Canonicalize(std::vector<int64_t>& d) const {
  if (chunk_slot_ < 0 || chunk_slot_ >= static_cast<int>(d.size()) || d[chunk_slot_] == 0) return;
  for (int slot : {swap_slot_, vec_slot_, unroll_slot_}) d[slot] = slots_[slot].choices.front();
}

absl::StatusOr<Schedule> CpuSpace::Apply(const Candidate& c) const {
  LATHE_TRY(CheckDecisions(slots_, c.decisions));
  auto d = [&](int slot) { return c.decisions[slot]; };
  Schedule s(workload_);
  for (const std::string& st : an_.inline_stages) LATHE_TRY(s.ComputeInline(st));
  for (size_t p = 0; p < an_.pad_stages.size(); ++p) {
    const std::string& st = an_.pad_stages[p];
    if (d(pad_slot_[p]) == 0) {
      LATHE_TRY(s.ComputeInline(st));
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
    // Computed at root for every row: the rows in parallel where there are several.
    const Stage* rs = s.FindStage(rf);
    if (!rows.empty() && rs->tensor->shape[0] >= 2 * target_.cores) {
      LATHE_TRY(s.Parallel(rf, rows[0]));
    }
  }
  // The output and its accumulator.
  const bool chan = chan_slot_ >= 0 && d(chan_slot_) != 0;
  LATHE_TRY_VALUE(first_outer, chan ? ApplyChannelsInner(s, c) : ApplyTiles(s, c));
  const std::string& o = an_.out;

  // Other reductions (softmax, layer_norm statistics): at root in parallel, or per tile row.
  // Per tile only where the tile loop runs over rows alone (a reduction along the rows is
  // whole in each of them: at a loop over columns it would be recomputed per column tile),
  // and where every consumer is computed per tile too (the output, or a side stage at the
  // tile): a stage at root (an rfactor's partial results, a side stage at root) that read one
  // computed per tile would recompute it for each of its own points.
  std::vector<bool> per_tile(an_.side.size(), false);  // placed at the tile, as applied
  const bool row_tiles =
      !an_.side.empty() && !IteratesOver(*s.FindStage(o), first_outer, out_axes_.back());
  for (size_t i = 0; i < an_.side.size(); ++i) {  // consumers first
    const std::string& st = an_.side[i];
    bool at = d(side_slot_[i]) != 0 && row_tiles;
    for (const std::string& c : s.Consumers(st)) {
      const auto j =
          static_cast<size_t>(std::find(an_.side.begin(), an_.side.end(), c) - an_.side.begin());
      at = at && (c == o || (j < per_tile.size() && per_tile[j]));
    }
    if (at && s.ComputeAt(st, o, first_outer).ok()) {
      per_tile[i] = true;
      continue;
    }
    const Stage* ss = s.FindStage(st);
    if (!ss->tensor->axes.empty() && ss->tensor->shape[0] > 1) {
      LATHE_TRY(s.Parallel(st, ss->root_loops[0]));
    }
  }
  return s;
}

absl::StatusOr<std::string> CpuSpace::ApplyTiles(Schedule& s, const Candidate& c) const {
  auto d = [&](int slot) { return c.decisions[slot]; };
  if (an_.cache_write) LATHE_TRY(s.CacheWrite(an_.out, "local").status());
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
    const int64_t vectors = (shape[4] + target_.vector_lanes - 1) / target_.vector_lanes;
    const int64_t regs = d(tile_slot_[1]) * d(tile_slot_[3]) * vectors;
    const int64_t bytes = d(tile_slot_[0]) * d(tile_slot_[1]) * d(tile_slot_[2]) * shape[3] *
                          shape[4] * static_cast<int64_t>(sizeof(float));
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
  if (d(swap_slot_) && n >= 2) std::swap(outer[n - 1], outer[n - 2]);
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
  // masked or gathered tails that cost more than they save.
  int64_t vt = d(tile_slot_[n - 1]);
  bool vec =
      d(vec_slot_) != 0 && vt > 1 && (vt % target_.vector_lanes == 0 || (vt & (vt - 1)) == 0);
  if (vec && d(tile_slot_[n - 1]) > 1) LATHE_TRY(s.Vectorize(o, inner[n - 1]));
  const std::string& tile_loop = outer_loops.back();

  // The accumulator, computed for one tile: reduce loops outside, the tile inside.
  if (!an_.acc.empty()) {
    const std::string& a = an_.acc;
    LATHE_TRY(s.ComputeAt(a, o, tile_loop));
    const Stage* as = s.FindStage(a);
    auto [spatial, reduce] = RootLoopsOf(*as);
    if (chunk > 0) {
      LATHE_TRY(ApplyChunkedAccumulator(s, c, spatial, reduce));
    } else {
      std::vector<std::string> aorder = reduce;
      int64_t uk = d(unroll_k_slot_);
      std::string kin;
      if (uk > 1 && !reduce.empty()) {
        LATHE_TRY_VALUE(kp, s.Split(a, reduce.back(), {uk}));
        aorder.back() = kp[0];
        kin = kp[1];
        aorder.push_back(kin);
      }
      aorder.insert(aorder.end(), spatial.begin(), spatial.end());
      LATHE_TRY(s.Reorder(a, aorder));
      if (!kin.empty()) LATHE_TRY(s.Unroll(a, kin));
      // Straight-line code per reduce step: unrolled tile rows x vectors per row x unroll_k.
      // Past a few times the register file it only spills and slows the JIT down.
      // Rows are unrolled only around a vector loop: unrolled copies of scalar loops only bloat.
      bool unroll_rows = d(unroll_slot_) != 0 && vec;
      int64_t body =
          uk * (vec ? (d(tile_slot_[n - 1]) + target_.vector_lanes - 1) / target_.vector_lanes : 1);
      if (unroll_rows) {
        for (size_t i = 0; i + 1 < n; ++i) {
          if (d(tile_slot_[i]) <= 16) body *= d(tile_slot_[i]);
        }
      }
      if (body > 8 * target_.vector_registers) {
        return absl::InvalidArgumentError(
            absl::StrCat("register tile of ", body, " vector operations per step is too large"));
      }
      if (unroll_rows) {
        for (size_t i = 0; i + 1 < spatial.size(); ++i) {
          // Extents here are nominal (the full axis); the region is one tile.
          if (d(tile_slot_[i]) > 1 && d(tile_slot_[i]) <= 16) LATHE_TRY(s.Unroll(a, spatial[i]));
        }
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
  return outer_loops[0];
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
                                    rc[1], reduce[1],  reduce[2]};
  std::string kin;
  if (const int64_t uk = d(unroll_k_slot_); uk > 1) {
    LATHE_TRY_VALUE(kp, s.Split(a, reduce[3], {uk}));
    order.push_back(kp[0]);
    kin = kp[1];
  }
  order.push_back(kin.empty() ? reduce[3] : kin);
  order.insert(order.end(), {spatial[1], xs[1], spatial[4]});
  LATHE_TRY(s.Reorder(a, order));
  if (!kin.empty()) LATHE_TRY(s.Unroll(a, kin));
  if (d(tile_slot_[1]) > 1) LATHE_TRY(s.Unroll(a, spatial[1]));
  if (d(tile_slot_[3]) > 1) LATHE_TRY(s.Unroll(a, xs[1]));
  return s.Vectorize(a, spatial[4]);
}

void CpuSpace::FindChannelAxis(const Stage& acc_def) {
  const ir::Tensor& t = acc_def.tensor;
  const size_t n = t->axes.size();
  // Nearest the innermost axis first; the innermost one is the default vector axis already.
  for (int a = static_cast<int>(n) - 2; a >= 0; --a) {
    if (t->shape[a] % target_.vector_lanes != 0) continue;
    const ir::ExprNode* var = t->axes[a]->var.get();
    int pack = -1, dim = -1;
    bool ok = true;
    ir::Visit(t->body, [&](const ir::Expr& x) {
      if (!ok || x->kind != ir::ExprKind::kTensorRead) return;
      for (size_t i = 0; i < x->operands.size(); ++i) {
        if (!ir::UsesVar(x->operands[i], var)) continue;
        auto p = std::find(an_.pack.begin(), an_.pack.end(), x->name);
        const int pi = static_cast<int>(p - an_.pack.begin());
        // Read as a plain index, by one packable input, in one dimension.
        if (p == an_.pack.end() || x->operands[i].get() != var || (pack >= 0 && pack != pi) ||
            (dim >= 0 && dim != static_cast<int>(i))) {
          ok = false;
          return;
        }
        pack = pi;
        dim = static_cast<int>(i);
      }
    });
    if (!ok || pack < 0) continue;
    an_.chan_axis = a;
    an_.chan_pack = pack;
    an_.chan_dim = dim;
    return;
  }
}

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
  for (size_t p = 0; p < an_.pack.size(); ++p) {
    const bool chan_pack = static_cast<int>(p) == an_.chan_pack;
    if (!chan_pack && d(pack_slot_[p]) == 0) continue;
    LATHE_TRY_VALUE(name, s.CacheRead(an_.pack[p], "global", {a}));
    pack_stages[p] = name;
    if (!chan_pack) continue;
    std::vector<std::string> dims = s.FindStage(name)->root_loops;
    std::string cd = dims[an_.chan_dim];
    dims.erase(dims.begin() + an_.chan_dim);
    dims.push_back(cd);
    LATHE_TRY(s.StorageOrder(name, dims));
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
  std::vector<std::string> oorder = outer;
  oorder.insert(oorder.end(), inner.begin(), inner.end());
  LATHE_TRY(s.Reorder(o, oorder));
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
  // The innermost reduce loop (the kernel's columns) unrolled whole when it is short.
  if (d(unroll_k_slot_) > 1 && !reduce.empty() &&
      s.FindStage(a)->loops.at(reduce.back()).extent <= 8) {
    LATHE_TRY(s.Unroll(a, reduce.back()));
  }
  for (size_t p = 0; p < pack_stages.size(); ++p) {
    if (pack_stages[p].empty()) continue;
    if (static_cast<int>(p) == an_.chan_pack) {
      LATHE_TRY(s.ComputeAt(pack_stages[p], o, par));
      continue;
    }
    size_t at = std::min<size_t>(static_cast<size_t>(d(pack_slot_[p])) - 1, outer.size() - 1);
    LATHE_TRY(s.ComputeAt(pack_stages[p], o, at < depth ? par : outer[at]));
  }
  return par;
}

absl::StatusOr<Candidate> CpuSpace::Sample(std::mt19937_64& rng) const {
  absl::Status last;
  for (int attempt = 0; attempt < 64; ++attempt) {
    Candidate c;
    for (const Slot& s : slots_) {
      std::uniform_int_distribution<size_t> pick(0, s.choices.size() - 1);
      c.decisions.push_back(s.choices[pick(rng)]);
    }
    auto f = Finish(std::move(c));
    if (f.ok()) return f;
    last = f.status();
  }
  return absl::InternalError("no valid sample in 64 attempts: " + std::string(last.message()));
}

absl::StatusOr<Candidate> CpuSpace::Mutate(const Candidate& base, std::mt19937_64& rng,
                                           const KnownCandidates* known) const {
  absl::Status last = absl::InternalError("space has no decision to mutate");
  for (int attempt = 0; attempt < 32; ++attempt) {
    Candidate c;  // not a copy of `base`: its trace and schedule are replaced anyway
    c.sketch = base.sketch;
    c.decisions = base.decisions;
    std::uniform_int_distribution<size_t> which(0, slots_.size() - 1);
    // Usually one decision, sometimes two.
    int changes = std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? 2 : 1;
    bool changed = false;
    for (int k = 0; k < changes; ++k) {
      size_t i = which(rng);
      const auto& ch = slots_[i].choices;
      if (ch.size() < 2) continue;
      // Prefer a neighbouring value: tile sizes move by a step up or down.
      auto pos = std::find(ch.begin(), ch.end(), c.decisions[i]) - ch.begin();
      std::uniform_int_distribution<int> step(-2, 2);
      int64_t np = std::clamp<int64_t>(pos + step(rng), 0, static_cast<int64_t>(ch.size()) - 1);
      if (np == pos) np = (pos + 1) % static_cast<int64_t>(ch.size());
      c.decisions[i] = ch[np];
      changed = true;
    }
    if (!changed) continue;
    if (const Candidate* k = known ? known->Find(c.decisions) : nullptr) return *k;
    auto f = Finish(std::move(c));
    if (f.ok()) return f;
    last = f.status();
  }
  return last;
}

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
    // two input-channel blocks per chunk, the padding computed once. First where the weights
    // do not fit an L2 cache (more than 1 MiB): conv 3x3/512/7x7 on Zen 3 (AVX2, 2 threads)
    // took 1.7-1.8 ms chunked against 2.0-2.1 ms for its best tuned record, conv 3x3/256/
    // 14x14 1.53-1.57 ms against 1.71-1.98 ms; 3x3/128/28x28 and 3x3/64/56x56, with their
    // weights in L2, measured the same either way.
    std::vector<std::vector<int64_t>> chunked;
    if (chunk_slot_ >= 0 && params.ok()) {
      const int64_t tk = Nearest(tile_slot_[1], std::min<int64_t>(4, shape[1]));
      const int64_t vectors = (shape[4] + lanes - 1) / lanes;
      const int64_t tx = Nearest(tile_slot_[3], std::clamp<int64_t>(acc / (tk * vectors), 1, ow));
      int64_t ty = 1;
      for (int64_t r = 1; r <= shape[2]; ++r) {
        const int64_t tasks = shape[0] * ((shape[1] + tk - 1) / tk) * ((shape[2] + r - 1) / r);
        if (shape[2] % r == 0 && tk * r * ow * shape[4] * 4 <= kMaxChunkedTileBytes &&
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
    const bool chunked_first = weight_bytes > (int64_t{1} << 20);
    // Otherwise one of them third (measured in the first round), the others last.
    auto emit_chunked = [&](size_t count) {
      for (size_t i = 0; i < count && !chunked.empty(); ++i) {
        if (static_cast<int>(out.size()) < max) emit(std::move(chunked.front()));
        chunked.erase(chunked.begin());
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
    const bool swap = n == 2;
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

absl::StatusOr<Candidate> CpuSpace::FromTrace(const ir::Trace& trace) const {
  if (trace.sketch < 0 || trace.sketch >= num_sketches()) {
    return absl::InvalidArgumentError("trace was not produced by the search space");
  }
  Candidate c;
  c.sketch = trace.sketch;
  c.decisions = trace.decisions;
  // Traces recorded before the rfactor, channel-vector or chunk slots existed lack them: they
  // chose no rfactor, the innermost axis as the vector axis and no chunks (0s).
  const size_t optional =
      static_cast<size_t>(std::count_if(rfactor_slot_.begin(), rfactor_slot_.end(),
                                        [](int slot) { return slot >= 0; })) +
      (chan_slot_ >= 0 ? 1 : 0) + (chunk_slot_ >= 0 ? 1 : 0);
  if (c.decisions.size() >= slots_.size() - optional && c.decisions.size() < slots_.size()) {
    c.decisions.resize(slots_.size(), 0);
  }
  return MatchesTrace(Finish(c), trace.instructions);
}

}  // namespace

CpuTarget HostCpuTarget() {
  const codegen::CpuInfo& cpu = codegen::HostCpu();
  CpuTarget t;
  t.vector_lanes = std::max(1, cpu.vector_bits / 32);
  t.cores = std::max(1, cpu.cores);
  t.vector_registers = cpu.vector_bits >= 512 ? 32 : 16;
  return t;
}

absl::StatusOr<std::unique_ptr<SearchSpace>> SearchSpace::Create(const ir::Workload& workload,
                                                                 const CpuTarget& target) {
  auto s = std::make_unique<CpuSpace>(workload, target);
  if (auto st = s->Init(); !st.ok()) return st;
  return std::unique_ptr<SearchSpace>(std::move(s));
}

}  // namespace lathe::tuner
