// \file
// The CPU search space's rule-picked candidates (SearchSpace::Heuristic): the rules of
// tuner/cpu_rules/ in order, over one RuleContext. The space itself: space.cc.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "tuner/cpu_rules/rule.h"
#include "tuner/cpu_space.h"

namespace lathe::tuner::internal {

RuleContext::RuleContext(const CpuSpace& space, int max, std::vector<Candidate>* out)
    : workload(*space.workload_),
      target(space.target_),
      an(space.an_),
      shape(space.workload_->output()->shape),
      n(space.out_axes_.size()),
      lanes(space.target_.vector_lanes),
      acc_regs(std::max(1, space.target_.vector_registers - 4)),
      tile_slot(space.tile_slot_),
      parallel_slot(space.parallel_slot_),
      swap_slot(space.swap_slot_),
      vec_slot(space.vec_slot_),
      unroll_slot(space.unroll_slot_),
      unroll_k_slot(space.unroll_k_slot_),
      pack_slot(space.pack_slot_),
      side_slot(space.side_slot_),
      pad_slot(space.pad_slot_),
      rfactor_slot(space.rfactor_slot_),
      chan_slot(space.chan_slot_),
      chunk_slot(space.chunk_slot_),
      dw_cols_slot(space.dw_cols_slot_),
      dw_chan_slot(space.dw_chan_slot_),
      space_(space),
      max_(max),
      out_(out) {}

int64_t RuleContext::Nearest(int slot, int64_t want) const { return space_.Nearest(slot, want); }

// Multiply-adds per padded element up to which the rule inlines a padding (see Defaults).
constexpr double kInlinePadMaxReuse = 32;
// ... of a blocked convolution's plain input (a model's first layer): each input element is a
// broadcast scalar, and the copy at root is a pass over the largest image of the model. AVX2,
// rule:1 at root / inlined (us): PP-OCR det's 3 -> 16 3x3/2 at 640x640 (36 products an
// element) 1127-1842 / 723-821, rec's at 48x320 41-70 / 34-41, cls's 3 -> 8 24-26 / 16-17;
// ResNet-18's 7x7/2 3 -> 64 (743) 1970-2293 / 2098-2168: no gain, kept at root.
constexpr double kInlinePlainInputPadMaxReuse = 64;

std::vector<int64_t> RuleContext::Defaults() const {
  const std::vector<Slot>& slots = space_.slots_;
  std::vector<int64_t> d(slots.size(), 0);
  for (size_t i = 0; i < slots.size(); ++i) d[i] = slots[i].choices.front();
  // Paddings computed once at root where the copy is read many times (dense convolutions: its
  // loads need no bounds checks), inlined where it is read a few times (a depthwise
  // convolution is bound by memory, and a copy at root doubles its traffic; plain NCHW,
  // single thread, AVX-512: depthwise 3x3 380-404 -> 275-293 us, 3x3 stride 2 864-976 ->
  // 412-637, 5x5 stride 2 593-603 -> 409-502). Not in the blocked layout, whose vectors of
  // channels load a padded copy faster (blocked depthwise 5x5 153-160 us at root, 231-297
  // inlined).
  for (size_t p = 0; p < pad_slot.size(); ++p) {
    // (Rows narrower than a vector stay scalar with the padding inlined: kept at root.)
    const double max_reuse =
        an.plain_input_conv ? kInlinePlainInputPadMaxReuse : kInlinePadMaxReuse;
    const bool inline_pad = (an.plain_input_conv || !an.blocked_conv) &&
                            space_.pad_reuse_[p] <= max_reuse && !shape.empty() &&
                            shape.back() >= lanes;
    d[pad_slot[p]] = Nearest(pad_slot[p], inline_pad ? 0 : 1);
  }
  // Long row reductions as vector partial results (softmax 1536x128 on AVX2: 1.04 ms
  // without, 0.35 ms tuned with; layer_norm 128x768: 163 -> 73 us).
  for (int slot : rfactor_slot) {
    if (slot >= 0) d[slot] = Nearest(slot, lanes);
  }
  // Row statistics (and their partial results) per row tile, in the output's parallel loop
  // (softmax 1536x128 on Zen 3: 888-1114 us at root, 150-226 us per tile).
  for (int slot : side_slot) d[slot] = Nearest(slot, 1);
  // A sepconv2d's depthwise register tile as the blocked depthwise convolution's first one
  // (10 columns of 320 on AVX-512 ran 0.95-1.10 ms against 1.11-1.24 ms for 20, PP-OCR det's
  // 16 -> 32 channels at 320x320 on Zen 4).
  if (dw_cols_slot >= 0) {
    const ir::Tensor* dw = space_.workload_->Find(an.dw_out);
    d[dw_cols_slot] =
        Nearest(dw_cols_slot, FirstTileColumns(dw != nullptr ? (*dw)->shape[3] : shape[3]));
  }
  return d;
}

void RuleContext::Emit(std::vector<int64_t> d) {
  if (!seen_.insert(d).second) return;
  Candidate c;
  c.sketch = 0;
  c.decisions = std::move(d);
  auto f = space_.Finish(std::move(c));
  if (f.ok()) out_->push_back(std::move(*f));
}

int64_t RuleContext::VectorsFor(int64_t elems) const { return space_.VectorsFor(elems); }

int64_t RuleContext::ColumnsFor(int64_t width, int64_t per_col) const {
  int64_t best = 1;
  for (int64_t c = 1; c * per_col <= acc_regs && c <= width; ++c) {
    if (width % c == 0) best = c;
  }
  if (best * per_col * 2 <= acc_regs) best = std::min<int64_t>(width, acc_regs / per_col);
  return best;
}

int64_t RuleContext::FirstTileColumns(int64_t width) const {
  return ColumnsFor(width, target.vector_registers >= 32 ? 2 : 1);
}

int64_t RuleContext::ChunkedTileBytes(int64_t images, int64_t blocks, int64_t rows) const {
  return space_.ChunkedTileBytes(images, blocks, rows);
}

const std::vector<std::unique_ptr<CpuRule>>& CpuRules() {
  static const std::vector<std::unique_ptr<CpuRule>>* const rules = [] {
    auto* r = new std::vector<std::unique_ptr<CpuRule>>();
    r->push_back(MakeWinogradRule());
    r->push_back(MakeBlockedConvRule());
    r->push_back(MakeChannelsInnerRule());
    r->push_back(MakePanelMatmulRule());
    r->push_back(MakeRegisterTilesRule());
    return r;
  }();
  return *rules;
}

std::vector<Candidate> CpuSpace::Heuristic(int max) const {
  std::vector<Candidate> out;
  if (max <= 0) return out;
  RuleContext c(*this, max, &out);
  for (const std::unique_ptr<CpuRule>& rule : CpuRules()) {
    if (rule->Propose(c)) break;
  }
  return out;
}

}  // namespace lathe::tuner::internal
