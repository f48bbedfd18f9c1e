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

}  // namespace

namespace internal {

// A stage's root loops: the spatial ones (one per axis), then the reduce ones.
std::pair<std::vector<std::string>, std::vector<std::string>> RootLoopsOf(const Stage& st) {
  const auto mid = st.root_loops.begin() + static_cast<std::ptrdiff_t>(st.tensor->axes.size());
  return {std::vector<std::string>(st.root_loops.begin(), mid),
          std::vector<std::string>(mid, st.root_loops.end())};
}

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
  // A plain NCHW depthwise convolution may be computed over vectors of channels instead
  // (ApplyDepthwiseChannels) where they are whole vectors: its input read through its padding
  // stage, or X without one.
  if (an_.channels_private && workload_->spec.op == "conv2d" && an_.pad_stages.size() <= 1) {
    absl::StatusOr<ir::Conv2dParams> p = ir::GetConv2dParams(workload_->spec);
    // A grouped one alike where a group's output channels are one or two vectors and its input
    // channels whole vectors: each tile, a group's output channels, then reads its own group's
    // input channels, copied as one block. (A tile of one vector of a two-vector group copied a
    // wider input: AVX2 code, 3x3 160 ch at 14x14 in groups of 16, 825 us; the blocked
    // layout's kernel 57; groups of 8 52, blocked 80; Zen 4, 2 threads.)
    const int64_t lanes = target_.vector_lanes;
    const bool grouped = p.ok() && p->groups > 1 && !p->depthwise() &&
                         (p->k / p->groups) % lanes == 0 && (p->k / p->groups) <= 2 * lanes &&
                         (p->c / p->groups) % lanes == 0;
    if (p.ok() && (p->depthwise() || grouped) && !p->blocked() && !p->nhwc && p->dilation_h == 1 &&
        p->dilation_w == 1 && p->k % lanes == 0) {
      an_.dw_input = an_.pad_stages.empty() ? "X" : an_.pad_stages[0];
      an_.group_out = grouped ? p->k / p->groups : 0;
    }
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
    // where the channels are the vector (NCHW convolutions, and plain grouped ones over channel
    // vectors: the columns are the rows).
    tile_slot_.push_back(AddSlot("tile." + out_axes_[a],
                                 TileChoices(e, lanes, inner ? 64 : std::max(32, 4 * lanes), inner,
                                             std::max(1, (target_.vector_registers - 4) / 2),
                                             !inner || an_.chan_axis >= 0 || an_.group_out > 0)));
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
  // Last: a plain depthwise convolution over vectors of channels (1) or of columns (0).
  if (!an_.dw_input.empty()) dw_chan_slot_ = AddSlot("vectorize.channels", {0, 1});
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
  // Sets `unread` slots to their first choice; whether any was not.
  auto reset_to_first = [&](const std::vector<int>& unread) {
    bool reset = false;
    for (int slot : unread) {
      reset |= d[slot] != slots_[slot].choices.front();
      d[slot] = slots_[slot].choices.front();
    }
    return reset;
  };
  if (dw_chan_slot_ >= 0 && dw_chan_slot_ < static_cast<int>(d.size()) && d[dw_chan_slot_] != 0) {
    // Over channel vectors (ApplyDepthwiseChannels) only the rows, the columns and the padding
    // are read.
    std::vector<int> unread = {tile_slot_[0], tile_slot_[1], parallel_slot_, swap_slot_,
                               vec_slot_,     unroll_slot_,  unroll_k_slot_};
    unread.insert(unread.end(), pack_slot_.begin(), pack_slot_.end());
    return reset_to_first(unread);
  }
  if (an_.panel_matmul && swap_slot_ < static_cast<int>(d.size())) {
    // A panel matmul's loop order is fixed (ApplyTiles): the slot is not read.
    return reset_to_first({swap_slot_});
  }
  if (chunk_slot_ < 0 || chunk_slot_ >= static_cast<int>(d.size()) || d[chunk_slot_] == 0) {
    return false;
  }
  return reset_to_first({swap_slot_, vec_slot_, unroll_slot_});
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
      (chan_slot_ >= 0 ? 1 : 0) + (chunk_slot_ >= 0 ? 1 : 0) + (pair_slot_ >= 0 ? 1 : 0) +
      (dw_chan_slot_ >= 0 ? 1 : 0);
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
