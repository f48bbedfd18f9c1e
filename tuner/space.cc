#include "tuner/space.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "codegen/host.h"
#include "ir/functor.h"
#include "ir/op_registry.h"
#include "ir/ops.h"
#include "tuner/cpu_space.h"
#include "tuner/decisions.h"

namespace lathe::tuner {

namespace {

using ir::Schedule;
using ir::Stage;

// Candidate tile sizes for a loop of extent `e`: small values, multiples of the vector width,
// and the extent itself when small; capped so that register tiles stay plausible.
// Divisors of the extent come first: a tile that does not divide its loop needs guards in
// the innermost body. Extents with few divisors (primes) also get a few powers of two.
// `micro_rows`: the rows of the target's widest register tile of two vectors per row (6 on
// AVX2, 14 on AVX-512).
std::vector<int64_t> TileChoices(int64_t e, int lanes, int64_t cap, bool inner, int64_t micro_rows,
                                 bool micro) {
  std::set<int64_t> c;
  for (int64_t d = 1; d <= std::min<int64_t>(e, cap); ++d) {
    if (e % d == 0) c.insert(d);
  }
  if (c.size() < 4) c.insert({2, 4, 8, 16});
  // Row counts of register micro-kernels (6x16 on AVX2) rarely divide the extent.
  if (micro) c.insert({3, 4, 5, 6, 8, micro_rows});
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

// A stage's root loops: the spatial ones (one per axis), then the reduce ones.
std::pair<std::vector<std::string>, std::vector<std::string>> RootLoopsOf(const Stage& st) {
  const auto mid = st.root_loops.begin() + static_cast<std::ptrdiff_t>(st.tensor->axes.size());
  return {std::vector<std::string>(st.root_loops.begin(), mid),
          std::vector<std::string>(mid, st.root_loops.end())};
}

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

namespace {

// A conv2d's parameters, or a sepconv2d's depthwise (`depthwise`) or 1x1 part.
absl::StatusOr<ir::Conv2dParams> ConvPartParams(const ir::WorkloadSpec& spec, bool depthwise) {
  if (spec.op == ir::OpName(ir::OpKind::kSepConv2d)) {
    absl::StatusOr<ir::SepConv2dParams> p = ir::GetSepConv2dParams(spec);
    if (!p.ok()) return p.status();
    return depthwise ? p->dw : p->pw;
  }
  return ir::GetConv2dParams(spec);
}

}  // namespace

absl::StatusOr<ir::Conv2dParams> BlockedConvParams(const ir::WorkloadSpec& spec) {
  return ConvPartParams(spec, /*depthwise=*/false);
}

absl::StatusOr<ir::Conv2dParams> PaddedConvParams(const ir::WorkloadSpec& spec) {
  return ConvPartParams(spec, /*depthwise=*/true);
}

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
  const bool sepconv = workload_->spec.op == ir::OpName(ir::OpKind::kSepConv2d);
  if (sepconv) {
    an_.dw_out = "dw";
    an_.dw_acc = "dwconv";
  }
  for (auto it = stages.rbegin(); it != stages.rend(); ++it) {
    const Stage& s = *it;
    if (s.is_output || s.name == an_.acc || s.name == an_.dw_out || s.name == an_.dw_acc) continue;
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
    for (const ir::IterVar& r : acc_def->tensor->reduce_axes()) {
      an_.reduce_extents.push_back(r->extent);
    }
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

  if (workload_->spec.op == "conv2d" || sepconv) {
    absl::StatusOr<ir::Conv2dParams> p = BlockedConvParams(workload_->spec);
    an_.blocked_conv = p.ok() && p->blocked();
    an_.dense_blocked_conv = an_.blocked_conv && p->groups == 1;
    an_.plain_input_conv = an_.blocked_conv && p->plain_input;
  }
  if (workload_->spec.op == "matmul" || workload_->spec.op == "batch_matmul") {
    absl::StatusOr<ir::MatmulParams> p = ir::GetMatmulParams(workload_->spec);
    an_.panel_matmul = p.ok() && p->bpanel > 0;
  }
  if (workload_->spec.op == "winograd_in") an_.unrolled_axes = {0, 1};
  if (workload_->spec.op == "winograd_out") an_.unrolled_axes = {3, 5};
  // A blocked layout's channels (a panel matmul's columns) are innermost already: no
  // channel-vector alternative. Not for any op in such a layout (a pooling over nchw8c took
  // 2.0-3.6 ms with its channel blocks as the vector, 0.1 ms vectorized over the block: PP-OCR
  // det's global average pool at 160x160, AVX2).
  auto layout = workload_->spec.params.find("layout");
  absl::StatusOr<int64_t> block =
      layout == workload_->spec.params.end() ? 0 : ir::LayoutBlock(layout->second);
  const bool blocked_layout = block.ok() && *block > 0;
  if (acc_def && acc_def->tensor->axes.size() >= 3 && !an_.blocked_conv && !an_.panel_matmul &&
      !blocked_layout) {
    FindChannelAxis(*acc_def);
  }
  if (acc_def && acc_def->tensor->axes.size() >= 3 && !blocked_layout && !an_.blocked_conv) {
    const ir::Tensor& t = acc_def->tensor;
    const ir::ExprNode* chan = t->axes[t->axes.size() - 3]->var.get();
    bool all = true, any = false;
    ir::Visit(t->body, [&](const ir::Expr& x) {
      if (x->kind != ir::ExprKind::kTensorRead) return;
      any = true;
      all = all && std::any_of(x->operands.begin(), x->operands.end(),
                               [&](const ir::Expr& e) { return ir::UsesVar(e, chan); });
    });
    an_.channels_private = any && all;
  }
  out_axes_ = std::vector<std::string>(out->root_loops.begin(),
                                       out->root_loops.begin() + out->tensor->axes.size());
  int lanes = target_.vector_lanes;
  // Winograd transforms: their unrolled bodies hold every position's linear combination, and
  // LLVM takes 10-60 s on one with scalar channels or inlined padding (winograd_in 64
  // channels 56x56, m=4: 0.3 s as the rule builds it, 3.8 s with 14x14 tiles, 37 s with the
  // padding inlined too), each also slower to run: vectors of channels and the padding at
  // root are fixed, the tiles, loop order and parallel depth are searched.
  const bool transform = !an_.unrolled_axes.empty();
  for (size_t a = 0; a < out_axes_.size(); ++a) {
    int64_t e = out->tensor->shape[a];
    bool inner = a + 1 == out_axes_.size();
    // A transform's positions are unrolled whole; its channel block is the vector, whole.
    if (std::count(an_.unrolled_axes.begin(), an_.unrolled_axes.end(), a) != 0 ||
        (inner && transform)) {
      tile_slot_.push_back(AddSlot("tile." + out_axes_[a], {e}));
      continue;
    }
    // The rows of a micro-kernel: every axis but the innermost, which is the vector's, except
    // where the channels are the vector (NCHW convolutions: the columns are the rows).
    tile_slot_.push_back(AddSlot("tile." + out_axes_[a],
                                 TileChoices(e, lanes, inner ? 64 : std::max(32, 4 * lanes), inner,
                                             std::max(1, (target_.vector_registers - 4) / 2),
                                             !inner || an_.chan_axis >= 0)));
  }
  // A sepconv2d's parallel loop is (images, row tiles): its depthwise part is computed there.
  std::vector<int64_t> par;
  for (size_t p = 1; p <= out_axes_.size(); ++p) {
    if (!sepconv || p == 2) par.push_back(static_cast<int64_t>(p));
  }
  parallel_slot_ = AddSlot("parallel_depth", par);
  swap_slot_ = AddSlot(
      "swap_outer", out_axes_.size() >= 2 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0});
  vec_slot_ =
      AddSlot("vectorize", transform ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 1, 0});
  unroll_slot_ = AddSlot("unroll", {1, 0});
  unroll_k_slot_ = AddSlot(
      "unroll_k", an_.acc.empty() ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 2, 4, 8});
  for (const std::string& t : an_.pack) {
    std::vector<int64_t> depth = {0};
    for (size_t d = 1; d <= out_axes_.size(); ++d) depth.push_back(static_cast<int64_t>(d));
    pack_slot_.push_back(AddSlot("pack." + t, depth));
  }
  for (const std::string& s : an_.side) side_slot_.push_back(AddSlot("at." + s, {0, 1}));
  // Multiply-adds: the output's elements times the accumulator's reduction.
  double macs = 1;
  for (int64_t e : out->tensor->shape) macs *= static_cast<double>(e);
  for (int64_t e : an_.reduce_extents) macs *= static_cast<double>(e);
  for (const std::string& s : an_.pad_stages) {
    pad_slot_.push_back(
        AddSlot("root." + s, transform ? std::vector<int64_t>{1} : std::vector<int64_t>{0, 1}));
    double elems = 1;
    for (int64_t e : sch.FindStage(s)->tensor->shape) elems *= static_cast<double>(e);
    // A sepconv2d's padding feeds its depthwise part only.
    double pad_macs = macs;
    if (sepconv) {
      pad_macs = 1;
      for (int64_t e : sch.FindStage(an_.dw_acc)->tensor->shape) pad_macs *= static_cast<double>(e);
      for (const ir::IterVar& r : sch.FindStage(an_.dw_acc)->tensor->reduce_axes()) {
        pad_macs *= static_cast<double>(r->extent);
      }
    }
    pad_reuse_.push_back(pad_macs / std::max(elems, 1.0));
  }
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
  // 1: vectorized over the output channels; 2: also the input channels split by
  // kChanUnroll innermost of the reduction, unrolled (CpuSpace::ApplyChannelsInner).
  if (an_.chan_axis >= 0) {
    chan_slot_ = AddSlot("vectorize." + out_axes_[an_.chan_axis], {0, 1, 2});
  }
  // A dense blocked convolution can chunk its input-channel blocks (the first reduce loop):
  // chunk sizes up to 8 that divide them, below the whole (30 blocks: 1, 2, 3, 5, 6).
  if (an_.dense_blocked_conv && out_axes_.size() == 5 && !an_.acc.empty()) {
    const Stage* as = an_.cache_write ? out : sch.FindStage(an_.acc);
    const std::vector<std::string> reduce = RootLoopsOf(*as).second;
    if (reduce.size() == 4) {
      const int64_t blocks = as->loops.at(reduce[0]).extent;
      std::vector<int64_t> chunks = {0};
      for (int64_t b = 1; b <= 8; ++b) {
        if (b < blocks && blocks % b == 0) chunks.push_back(b);
      }
      if (chunks.size() > 1) chunk_slot_ = AddSlot("chunk." + reduce[0], chunks);
    }
  }
  // Dense blocked convolutions with blocks narrower than a vector (8-channel blocks on
  // AVX-512: 24, 40 or 72 channels, or 32-96 when the model compiler's other layers want 8):
  // each FMA of the register tile fills half a register, half the 512-bit peak (PP-OCR det's
  // 3x3 96->24 convs at 160x160 run at 174 GFLOP/s where its tuned 1x1 convs reach 275).
  // Blocks side by side in one register fill it. (A hand-made pairing of the det conv's
  // record schedule, 96->32: 10.2 ms paired against 10.7-14.2 ms unpaired on a noisy host;
  // the search has not had a go at it.) Only where the blocks pair up evenly: with a last
  // pair half full (24 channels) the tile's channel guard keeps that whole tile out of the
  // guard-free copy of the loop versioning (codegen/partition.cc), so it runs every padding
  // select too, 1.5x slower than unpaired.
  // Last, so that traces from before it existed still map to decisions (FromTrace pads 0).
  if (an_.dense_blocked_conv && !an_.acc.empty() && out_axes_.size() == 5) {
    const std::vector<int64_t>& shape = out->tensor->shape;
    if (shape[4] < lanes && lanes % shape[4] == 0 && shape[1] % (lanes / shape[4]) == 0) {
      pair_slot_ = AddSlot("pair_blocks", {0, 1});
    }
  }
  // Last: the columns of a sepconv2d's depthwise register tile.
  if (sepconv) {
    const int64_t ow = sch.FindStage(an_.dw_out)->tensor->shape[3];
    std::vector<int64_t> cols;
    for (int64_t c = 1; c <= std::min<int64_t>(ow, 32); ++c) {
      if (ow % c == 0 || c == 4 || c == 6 || c == 8 || c == 12 || c == 16) cols.push_back(c);
    }
    dw_cols_slot_ = AddSlot("dw_cols", cols);
  }
  return absl::OkStatus();
}

bool CpuSpace::Canonicalize(std::vector<int64_t>& d) const {
  bool paired_reset = false;
  if (pair_slot_ >= 0 && pair_slot_ < static_cast<int>(d.size()) && d[pair_slot_] != 0) {
    // Pairs need whole pairs of blocks in every tile and the whole block as the vector tile
    // (which a chunked candidate has).
    const int64_t block = workload_->output()->shape.back();
    const bool chunked = chunk_slot_ >= 0 && d[chunk_slot_] != 0;
    const int64_t blocks = workload_->output()->shape[1];
    if ((!chunked && (d[vec_slot_] == 0 || d[tile_slot_[4]] != block)) ||
        d[tile_slot_[1]] % PairFactor() != 0 || blocks % d[tile_slot_[1]] != 0) {
      d[pair_slot_] = 0;
      paired_reset = true;
    }
  }
  return CanonicalizeUnpaired(d) || paired_reset;
}

bool CpuSpace::CanonicalizeUnpaired(std::vector<int64_t>& d) const {
  if (an_.panel_matmul && swap_slot_ < static_cast<int>(d.size())) {
    // A panel matmul's loop order is fixed (ApplyTiles): the slot is not read.
    const bool reset = d[swap_slot_] != slots_[swap_slot_].choices.front();
    d[swap_slot_] = slots_[swap_slot_].choices.front();
    return reset;
  }
  if (chunk_slot_ < 0 || chunk_slot_ >= static_cast<int>(d.size()) || d[chunk_slot_] == 0) {
    return false;
  }
  bool reset = false;
  for (int slot : {swap_slot_, vec_slot_, unroll_slot_}) {
    reset |= d[slot] != slots_[slot].choices.front();
    d[slot] = slots_[slot].choices.front();
  }
  return reset;
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
  LATHE_TRY_VALUE(first_outer, chan ? ApplyChannelsInner(s, c) : ApplyTiles(s, c));
  const std::string& o = an_.out;

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
      LATHE_TRY_VALUE(kin, SplitInnermostReduce(s, a, uk, aorder));
      aorder.insert(aorder.end(), spatial.begin(), spatial.end());
      LATHE_TRY(s.Reorder(a, aorder));
      if (!kin.empty()) LATHE_TRY(s.Unroll(a, kin));
      // Straight-line code per reduce step: unrolled tile rows x vectors per row x unroll_k.
      // Past a few times the register file it only spills and slows the JIT down.
      // Rows are unrolled only around a vector loop: unrolled copies of scalar loops only bloat.
      bool unroll_rows = d(unroll_slot_) != 0 && vec;
      int64_t body = uk * (vec ? VectorsFor(d(tile_slot_[n - 1])) : 1);
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

void CpuSpace::FindChannelAxis(const Stage& acc_def) {
  const ir::Tensor& t = acc_def.tensor;
  const size_t n = t->axes.size();
  // Nearest the innermost axis first; the innermost one is the default vector axis already.
  for (int a = static_cast<int>(n) - 2; a >= 0; --a) {
    // At least one whole vector of channels (a last partial vector is masked: 40 = 16 + 16 + 8).
    if (t->shape[a] < target_.vector_lanes) continue;
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
  std::vector<std::string> copy_order;  // the channel pack's copy loops, where reordered
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
      LATHE_TRY(s.ComputeAt(pack_stages[p], o, par));
      if (!copy_order.empty()) LATHE_TRY(s.Reorder(pack_stages[p], copy_order));
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
    // Decisions as Apply reads them, before looking them up: a change to a slot the candidate
    // does not read (Canonicalize) is no change at all.
    if (!changed || (Canonicalize(c.decisions) && c.decisions == base.decisions)) continue;
    if (const Candidate* k = known ? known->Find(c.decisions) : nullptr) return *k;
    auto f = Finish(std::move(c));
    if (f.ok()) return f;
    last = f.status();
  }
  return last;
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
      (chan_slot_ >= 0 ? 1 : 0) + (chunk_slot_ >= 0 ? 1 : 0) + (pair_slot_ >= 0 ? 1 : 0);
  if (c.decisions.size() >= slots_.size() - optional && c.decisions.size() < slots_.size()) {
    c.decisions.resize(slots_.size(), 0);
  }
  return MatchesTrace(Finish(c), trace.instructions);
}

}  // namespace internal

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
  auto s = std::make_unique<internal::CpuSpace>(workload, target);
  if (auto st = s->Init(); !st.ok()) return st;
  return std::unique_ptr<SearchSpace>(std::move(s));
}

}  // namespace lathe::tuner
