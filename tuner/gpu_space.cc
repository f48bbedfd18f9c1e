#include "tuner/gpu_space.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "codegen/cuda/contraction.h"
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/cuda_driver.h"
#include "codegen/cuda/gpu_schedule.h"
#include "ir/functor.h"
#include "ir/target.h"
#include "tuner/decisions.h"
#include "tuner/gpu_space_internal.h"

namespace lathe::tuner {

namespace gpu_internal {

namespace {

using codegen::cuda::ReductionTiling;
using codegen::cuda::SpatialTile;
using codegen::cuda::SplitExtents;
using ir::Schedule;
using ir::Stage;

// Few outputs with a long reduction: worth a cross-thread reduction.
constexpr int64_t kCrossMaxOutputs = 8192;
constexpr int64_t kCrossMinReduce = 8;
// Registers a thread needs beyond its accumulator and operands (indices, loop counters).
constexpr int64_t kBaseRegisters = 24;

std::vector<int64_t> PowersOfTwoUpTo(int64_t limit) {
  std::vector<int64_t> out;
  for (int64_t p = 1; p <= std::max<int64_t>(limit, 1); p *= 2) out.push_back(p);
  return out;
}

}  // namespace

absl::Status GpuSpace::Init() {
  Schedule sch(workload_, "cuda");
  // Placeholders each stage reads once the paddings are inlined.
  Schedule inlined(workload_, "cuda");
  for (const Stage& s : sch.stages()) {
    if (!s.is_output && s.tensor->tag == "pad") {
      if (auto st = inlined.ComputeInline(s.name); !st.ok()) return st;
    }
  }
  if (sch.stages().empty()) return absl::InvalidArgumentError("workload has no stage");
  workload_stages_ = sch.stages();
  int64_t max_threads = target_.limits.max_threads_per_block;
  for (const Stage& s : sch.stages()) {
    StagePlan p;
    p.name = s.name;
    int si = static_cast<int>(stages_.size());
    p.reduction = s.tensor->is_reduction();
    p.pad = !s.is_output && s.tensor->tag == "pad";
    for (int64_t e : s.tensor->shape) p.spatial.push_back(e);
    const std::string& n = s.name;
    if (p.pad) p.pad_slot = AddSlot("root." + n, {0, 0, 0, 1}, si, Need::kAlways);
    if (!p.reduction) {
      std::vector<int64_t> threads;
      for (int64_t t : {32, 64, 128, 256, 512, 1024}) {
        if (t <= max_threads) threads.push_back(t);
      }
      p.threads_slot = AddSlot("threads." + n, threads, si, Need::kKept);
      p.inner_slot = AddSlot("inner." + n, {1, 1, 2, 4}, si, Need::kKept);
      stages_.push_back(std::move(p));
      continue;
    }
    const Stage* is = inlined.FindStage(n);
    for (const std::string& t : ir::ReadTensors(is->tensor->body)) {
      const ir::Tensor* tensor = workload_.Find(t);
      if (tensor && (*tensor)->is_placeholder()) p.inputs.push_back(t);
    }
    int64_t outputs = 1;
    for (int64_t e : p.spatial) outputs *= e;
    std::string axis = codegen::cuda::CrossThreadAxis(s);
    bool cross = !p.spatial.empty() && outputs <= kCrossMaxOutputs && !axis.empty() &&
                 s.loops.at(axis).extent >= kCrossMinReduce;
    p.kind_slot = AddSlot("kind." + n,
                          cross ? std::vector<int64_t>{kLocal, kShared, kCross}
                                : std::vector<int64_t>{kLocal, kShared},
                          si, Need::kAlways);
    size_t nsp = s.tensor->axes.size();
    for (size_t a = 0; a < nsp; ++a) {
      const std::string& ax = s.root_loops[a];
      int64_t e = p.spatial[a];
      bool last = a + 1 == nsp;
      p.vt.push_back(AddSlot("vthread." + n + "." + ax, {1, 1, 2}, si, Need::kTiled));
      p.th.push_back(AddSlot("thread." + n + "." + ax,
                             PowersOfTwoUpTo(std::min<int64_t>({e, 256, max_threads})), si,
                             Need::kTiled));
      // The per-thread tile of the last axis: consecutive elements of one thread.
      p.in.push_back(
          AddSlot((last ? "vector." : "inner.") + n + "." + ax, {1, 1, 2, 4, 8}, si, Need::kTiled));
    }
    for (size_t r = nsp; r < s.root_loops.size(); ++r) {
      p.k.push_back(
          AddSlot("reduce." + n + "." + s.root_loops[r], {1, 2, 4, 8, 16}, si, Need::kTiled));
    }
    // Inputs staged in shared memory, with register accumulation or alone.
    for (const std::string& t : p.inputs) {
      p.smem.push_back(AddSlot("shared." + n + "." + t, {0, 1, 1, 1}, si, Need::kStaged));
    }
    // float4 cooperative fetches and output writes; shared copies stored reduce-axis-major.
    p.vec_slot = AddSlot("vec4." + n, {1, 4}, si, Need::kTiled);
    p.layout_slot = AddSlot("reduce_major." + n, {0, 1}, si, Need::kStaged);
    p.unroll_slot = AddSlot("unroll." + n, {0, 1}, si, Need::kAlways);
    p.unroll_local_slot = AddSlot("unroll_local." + n, {0, 1}, si, Need::kLocal);
    std::vector<int64_t> rf;
    for (int64_t t : {32, 64, 128, 256}) {
      if (t <= max_threads) rf.push_back(t);
    }
    p.rf_slot = AddSlot("rf_threads." + n, rf, si, cross ? Need::kCross : Need::kAlways);
    if (!cross) slots_[p.rf_slot].choices = {rf.front()};
    stages_.push_back(std::move(p));
  }
  InitContraction();
  return absl::OkStatus();
}

// Tile shapes of the GEMM template. FMA: {BM, BN, BK, TM, TN}, the 8x8 register tile of a
// good SGEMM first; MMA: {BM, BN, BK, WM, WN}, warp tiles of 64x32 (4x4 m16n8k8 MMAs) first.
// The sixth entry: 1 pipelined (the next k-tile prefetched into registers: more registers, fewer
// stalls on global memory; unmeasured, so never the rule's first choice but offered to the search).
constexpr int64_t kFmaTiles[][6] = {
    {128, 128, 8, 8, 8, 0}, {128, 64, 8, 8, 4, 0}, {64, 128, 8, 4, 8, 0}, {64, 64, 8, 4, 4, 0},
    {64, 64, 16, 4, 4, 0},  {32, 64, 16, 2, 4, 0}, {64, 32, 16, 4, 2, 0}, {32, 32, 16, 2, 2, 0},
    {128, 128, 8, 8, 8, 1}, {64, 64, 8, 4, 4, 1},  {64, 64, 16, 4, 4, 1}};
constexpr int64_t kMmaTiles[][6] = {
    {128, 128, 16, 2, 4, 0}, {128, 64, 16, 2, 2, 0}, {64, 128, 16, 2, 2, 0}, {64, 64, 16, 2, 2, 0},
    {64, 64, 8, 2, 2, 0},    {32, 64, 16, 1, 2, 0},  {64, 32, 16, 2, 1, 0},  {32, 32, 8, 1, 1, 0},
    {128, 128, 16, 2, 4, 1}, {128, 64, 16, 2, 2, 1}, {64, 64, 16, 2, 2, 1}};

// The pipelined templates (cp.async, sm_80 and later): {BM, BN, BK, x, y, STAGES}.
// MMA: 64x64 warp tiles (4x8 m16n8k8 MMAs per k-step, CUTLASS's TF32 shape) in 128x128 and
// 128x256 blocks first; ptxas (sm_90) for 128x128x32 x3: 216 registers, no spills, 105 KiB
// shared, 2 blocks/SM. Smaller ones for problems that would not fill the SMs.
constexpr int64_t kMmaAsyncTiles[][6] = {{128, 128, 32, 2, 2, 3}, {128, 256, 32, 2, 4, 3},
                                         {256, 128, 32, 4, 2, 3}, {128, 128, 16, 2, 2, 4},
                                         {128, 64, 32, 2, 2, 3},  {64, 128, 32, 2, 2, 3},
                                         {64, 64, 32, 2, 2, 3},   {64, 64, 16, 2, 2, 4},
                                         {64, 32, 32, 2, 1, 3},   {32, 64, 32, 1, 2, 3}};
// FMA: 8x8 register tiles read as float4s; ptxas (sm_90) for 128x128x16 x3 (no tails): 128
// registers, no spills, 54 KiB shared, 2 blocks/SM.
constexpr int64_t kFmaAsyncTiles[][6] = {
    {128, 128, 16, 8, 8, 3}, {128, 128, 8, 8, 8, 4}, {128, 64, 16, 8, 8, 3}, {64, 128, 16, 8, 8, 3},
    {64, 64, 16, 4, 4, 3},   {64, 64, 16, 8, 8, 3},  {64, 32, 16, 4, 4, 3},  {32, 64, 16, 4, 4, 3}};

// Split-K tiles (a 7th parameter SPLITS is added): small, so that few outputs still make
// several blocks per split.
constexpr int64_t kMmaSplitTiles[][6] = {{64, 64, 32, 2, 2, 3}, {32, 32, 32, 2, 2, 3}};
constexpr int64_t kFmaSplitTiles[][6] = {{64, 64, 16, 4, 4, 3}, {32, 32, 16, 4, 4, 3}};
// Split-K is offered from this long a reduction (the rule: gpu_rules.cc).
constexpr int64_t kSplitMinReduce = 256;

namespace {

// The compute capability of an architecture name ("sm_90" -> 90; 0 when it is not one).
int ComputeCapability(const std::string& arch) {
  return arch.size() > 3 ? std::atoi(arch.c_str() + 3) : 0;
}

}  // namespace

void GpuSpace::InitContraction() {
  Schedule sch(workload_, "cuda");
  std::string stage;
  for (const Stage& s : sch.stages()) {
    if (!s.is_output && s.tensor->tag == "pad") {
      if (!sch.ComputeInline(s.name).ok()) return;
    } else if (s.tensor->is_reduction()) {
      if (!stage.empty()) return;  // one contraction per workload
      stage = s.name;
    }
  }
  if (stage.empty()) return;
  auto shape = codegen::cuda::MatchContraction(sch, stage);
  if (!shape.ok()) return;
  contraction_stage_ = stage;
  gemm_m_ = shape->m;
  gemm_n_ = shape->n;
  gemm_k_ = shape->k;
  gemm_batches_ = shape->batches;
  if (target_.tf32) {
    for (const auto& t : kMmaTiles) {
      variants_.push_back(
          {codegen::cuda::kContractionMmaTf32, {t[0], t[1], t[2], t[3], t[4], t[5]}});
    }
  }
  for (const auto& t : kFmaTiles) {
    variants_.push_back({codegen::cuda::kContractionFma, {t[0], t[1], t[2], t[3], t[4], t[5]}});
  }
  // The pipelined ones after those: a trace's decision is the index of its variant.
  const bool async =
      ComputeCapability(target_.arch) >= 80 && codegen::cuda::CheckAsyncOperands(sch, *shape).ok();
  if (target_.tf32 && async) {
    for (const auto& t : kMmaAsyncTiles) {
      variants_.push_back(
          {codegen::cuda::kContractionMmaTf32Async, {t[0], t[1], t[2], t[3], t[4], t[5]}});
    }
  }
  if (async) {
    for (const auto& t : kFmaAsyncTiles) {
      variants_.push_back(
          {codegen::cuda::kContractionFmaAsync, {t[0], t[1], t[2], t[3], t[4], t[5]}});
    }
  }
  // Split-K, for reductions of at least kSplitMinReduce: SPLITS in powers of two from 2 while
  // every split keeps at least two k-tiles.
  if (async && gemm_k_ >= kSplitMinReduce) {
    auto splits = [&](const auto& tiles, const char* name, bool on) {
      if (!on) return;
      for (const auto& t : tiles) {
        const int64_t k_tiles = (gemm_k_ + t[2] - 1) / t[2];
        for (int64_t s = 2; s <= 64 && k_tiles >= 2 * s; s *= 2) {
          variants_.push_back({name, {t[0], t[1], t[2], t[3], t[4], t[5], s}});
        }
      }
    };
    splits(kMmaSplitTiles, codegen::cuda::kContractionMmaTf32Async, target_.tf32);
    splits(kFmaSplitTiles, codegen::cuda::kContractionFmaAsync, true);
  }
}

absl::StatusOr<Schedule> GpuSpace::ApplyContraction(const Candidate& c) const {
  if (variants_.empty() || c.decisions.size() != 1 || c.decisions[0] < 0 ||
      c.decisions[0] >= static_cast<int64_t>(variants_.size())) {
    return absl::InvalidArgumentError("decisions do not fit the contraction sketch");
  }
  Schedule sch(workload_, "cuda");
  for (const StagePlan& p : stages_) {
    if (p.pad) LATHE_TRY(sch.ComputeInline(p.name));
  }
  const Variant& v = variants_[c.decisions[0]];
  LATHE_TRY(sch.Tensorize(contraction_stage_, v.name, v.params));
  return sch;
}

int64_t GpuSpace::ContractionBlocks(const std::vector<int64_t>& p) const {
  return (gemm_m_ + p[0] - 1) / p[0] * ((gemm_n_ + p[1] - 1) / p[1]) * gemm_batches_ *
         (p.size() > 6 ? p[6] : 1);
}

bool GpuSpace::Relevant(const std::vector<int64_t>& d, const Slot& s) const {
  if (s.stage < 0) return true;
  const StagePlan& p = stages_[s.stage];
  if (p.pad && d[p.pad_slot] == 0 && s.need != Need::kAlways) return false;
  if (!p.reduction) return true;
  int64_t kind = d[p.kind_slot];
  switch (s.need) {
    case Need::kAlways:
    case Need::kKept:
      return true;
    case Need::kTiled:
      return kind != kCross;
    case Need::kLocal:
      return kind == kLocal;
    case Need::kStaged:
      return kind == kShared || kind == kLocal;
    case Need::kCross:
      return kind == kCross;
  }
  return true;
}

absl::StatusOr<Schedule> GpuSpace::Apply(const Candidate& c) const {
  if (c.sketch == kContractionSketch) return ApplyContraction(c);
  if (c.sketch == kFlatSketch) {
    if (!c.decisions.empty())
      return absl::InvalidArgumentError("the flat mapping has no decisions");
    return codegen::cuda::DefaultGpuSchedule(workload_);
  }
  LATHE_TRY(CheckDecisions(slots_, c.decisions));
  auto d = [&](int slot) { return c.decisions[slot]; };
  Schedule sch(workload_, "cuda");
  for (const StagePlan& p : stages_) {
    if (p.pad && d(p.pad_slot) == 0) LATHE_TRY(sch.ComputeInline(p.name));
  }
  for (const StagePlan& p : stages_) {
    if (p.pad && d(p.pad_slot) == 0) continue;
    if (!p.reduction) {
      LATHE_TRY(
          codegen::cuda::ApplyElementwiseMapping(sch, p.name, d(p.threads_slot), d(p.inner_slot)));
      continue;
    }
    ReductionTiling t;
    int64_t kind = d(p.kind_slot);
    t.kind = kind == kLocal    ? ReductionTiling::Kind::kLocal
             : kind == kShared ? ReductionTiling::Kind::kShared
                               : ReductionTiling::Kind::kCrossThread;
    for (size_t a = 0; a < p.spatial.size(); ++a) {
      t.spatial.push_back({d(p.vt[a]), d(p.th[a]), d(p.in[a])});
    }
    for (int k : p.k) t.reduce_inner.push_back(d(k));
    if (kind == kShared || kind == kLocal) {
      std::vector<std::string> reads = ir::ReadTensors(sch.FindStage(p.name)->tensor->body);
      std::set<std::string> read(reads.begin(), reads.end());
      for (size_t i = 0; i < p.inputs.size(); ++i) {
        if (d(p.smem[i]) && read.count(p.inputs[i])) t.shared_inputs.push_back(p.inputs[i]);
      }
    }
    t.unroll_inner = d(p.unroll_slot) != 0;
    t.unroll_local = d(p.unroll_local_slot) != 0;
    t.rf_threads = d(p.rf_slot);
    t.vector = d(p.vec_slot);
    t.reduce_major = d(p.layout_slot) != 0;
    LATHE_TRY(codegen::cuda::ApplyReductionTiling(sch, p.name, t));
  }
  return sch;
}

absl::Status GpuSpace::CheckLimits(const Candidate& c, const Schedule& sch) const {
  auto src = codegen::cuda::BuildCudaSource(sch, "candidate");
  if (!src.ok()) return src.status();
  if (auto st = codegen::cuda::CheckLaunchLimits(src->plan, target_.limits); !st.ok()) return st;
  if (c.sketch == kFlatSketch) return absl::OkStatus();
  if (c.sketch == kContractionSketch) {
    // Accumulators and one k-step's operands per thread.
    const Variant& v = variants_[c.decisions[0]];
    const std::vector<int64_t>& p = v.params;
    const bool mma = codegen::cuda::IsTf32ContractionTemplate(v.name);
    const int64_t tm = mma ? p[0] / p[3] / 16 : p[3], tn = mma ? p[1] / p[4] / 8 : p[4];
    const int64_t threads = mma ? 32 * p[3] * p[4] : p[0] / p[3] * (p[1] / p[4]);
    // Register-staged: the pipelined one holds the next k-tile; cp.async: none, but two
    // k-steps of fragments (mma) or four k of operands (fma, read as float4s).
    const bool async = IsAsync(v);
    const int64_t prefetch = !async && p[5] ? (p[0] + p[1]) * p[2] / threads : 0;
    const int64_t operands =
        mma ? (async ? 2 : 1) * (tm * 4 + tn * 2) : (async ? 4 : 1) * (tm + tn);
    const int64_t regs = (mma ? tm * tn * 4 : tm * tn) + operands + prefetch + kBaseRegisters;
    if (regs > target_.limits.max_regs_per_thread) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the contraction needs about ", regs, " registers per thread"));
    }
    return absl::OkStatus();
  }
  // Registers: a thread of a locally accumulated tile holds its accumulators and, per reduce
  // step, one operand per tile row and column.
  for (const StagePlan& p : stages_) {
    if (!p.reduction || c.decisions[p.kind_slot] != kLocal) continue;
    int64_t acc = 1, operands = 0, threads = 1;
    for (size_t a = 0; a < p.spatial.size(); ++a) {
      std::vector<int64_t> ext = SplitExtents(
          p.spatial[a], {c.decisions[p.vt[a]], c.decisions[p.th[a]], c.decisions[p.in[a]]});
      acc *= ext[1] * ext[3];
      operands += ext[1] * ext[3];
      threads *= ext[2];
    }
    int64_t regs = acc + operands + kBaseRegisters;
    if (regs > target_.limits.max_regs_per_thread) {
      return absl::ResourceExhaustedError(absl::StrCat("stage '", p.name, "' needs about ", regs,
                                                       " registers per thread; the device allows ",
                                                       target_.limits.max_regs_per_thread));
    }
    if (regs * threads > target_.limits.max_regs_per_block) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "stage '", p.name, "' needs about ", regs * threads,
          " registers per block; the device allows ", target_.limits.max_regs_per_block));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Candidate> GpuSpace::Finish(Candidate c) const {
  auto s = Apply(c);
  if (!s.ok()) return s.status();
  if (auto st = CheckLimits(c, *s); !st.ok()) return st;
  c.trace = s->trace();
  c.schedule = std::make_shared<const Schedule>(std::move(*s));
  c.trace.sketch = c.sketch;
  c.trace.decisions = c.decisions;
  return c;
}

absl::StatusOr<Candidate> GpuSpace::Sample(std::mt19937_64& rng) const {
  auto pick = [&](const std::vector<int64_t>& v) {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
  };
  absl::Status last;
  for (int attempt = 0; attempt < 64; ++attempt) {
    if (std::uniform_int_distribution<int>(0, 15)(rng) == 0) {
      Candidate c;
      c.sketch = kFlatSketch;
      auto f = Finish(std::move(c));
      if (f.ok()) return f;
      last = f.status();
      continue;
    }
    if (!variants_.empty() && std::uniform_int_distribution<int>(0, 2)(rng) == 0) {
      Candidate c;
      c.sketch = kContractionSketch;
      c.decisions = {std::uniform_int_distribution<int64_t>(
          0, static_cast<int64_t>(variants_.size()) - 1)(rng)};
      auto f = Finish(std::move(c));
      if (f.ok()) return f;
      last = f.status();
      continue;
    }
    Candidate c;
    for (const Slot& s : slots_) c.decisions.push_back(pick(s.choices));
    // Threads of a tiled reduction: the innermost axes first (coalesced accesses on the last
    // axis), within a block budget drawn per stage.
    for (const StagePlan& p : stages_) {
      if (!p.reduction) continue;
      int64_t budget =
          std::min<int64_t>(pick({64, 128, 256, 256, 512}), target_.limits.max_threads_per_block);
      int64_t threads = 1;
      for (size_t a = p.th.size(); a-- > 0;) {
        const std::vector<int64_t>& ch = slots_[p.th[a]].choices;
        int64_t want = pick(ch), cap = std::max<int64_t>(1, budget / threads);
        int64_t t = 1;
        for (int64_t v : ch) {
          if (v <= std::min(want, cap)) t = std::max(t, v);
        }
        c.decisions[p.th[a]] = t;
        threads *= std::min(t, p.spatial[a]);
      }
    }
    auto f = Finish(std::move(c));
    if (f.ok()) return f;
    last = f.status();
  }
  return absl::InternalError("no valid gpu sample in 64 attempts: " + std::string(last.message()));
}

absl::StatusOr<Candidate> GpuSpace::Mutate(const Candidate& base, std::mt19937_64& rng,
                                           const KnownCandidates* known) const {
  if (base.sketch == kFlatSketch) {
    // No decision to change: its neighbours are the other sketches' candidates.
    absl::Status last;
    for (int attempt = 0; attempt < 16; ++attempt) {
      absl::StatusOr<Candidate> c = Sample(rng);
      if (c.ok() && c->sketch != kFlatSketch) return c;
      last = c.ok() ? absl::InternalError("sampled the flat mapping again") : c.status();
    }
    return last;
  }
  if (base.sketch == kContractionSketch) {
    // Another tile shape of the template.
    if (variants_.size() < 2 || base.decisions.size() != 1) {
      return absl::InvalidArgumentError("no other contraction variant");
    }
    absl::Status last;
    for (int attempt = 0; attempt < 8; ++attempt) {
      Candidate c;
      c.sketch = kContractionSketch;
      const int64_t n = static_cast<int64_t>(variants_.size());
      c.decisions = {(base.decisions[0] + std::uniform_int_distribution<int64_t>(1, n - 1)(rng)) %
                     n};
      if (const Candidate* k = known ? known->Find(c.decisions) : nullptr) return *k;
      auto f = Finish(std::move(c));
      if (f.ok()) return f;
      last = f.status();
    }
    return last;
  }
  if (base.decisions.size() != slots_.size()) {
    return absl::InvalidArgumentError("candidate is not from this search space");
  }
  absl::Status last = absl::InternalError("space has no decision to mutate");
  for (int attempt = 0; attempt < 32; ++attempt) {
    Candidate c;
    c.sketch = base.sketch;
    c.decisions = base.decisions;
    std::vector<size_t> open;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].choices.size() >= 2 && Relevant(c.decisions, slots_[i])) open.push_back(i);
    }
    if (open.empty()) break;
    int changes = std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? 2 : 1;
    for (int k = 0; k < changes; ++k) {
      size_t i = open[std::uniform_int_distribution<size_t>(0, open.size() - 1)(rng)];
      const auto& ch = slots_[i].choices;
      // Distinct values only: the choice lists repeat values to weight sampling.
      std::vector<int64_t> values(ch.begin(), ch.end());
      std::sort(values.begin(), values.end());
      values.erase(std::unique(values.begin(), values.end()), values.end());
      auto pos = std::find(values.begin(), values.end(), c.decisions[i]) - values.begin();
      int64_t n = static_cast<int64_t>(values.size());
      int64_t np =
          std::clamp<int64_t>(pos + std::uniform_int_distribution<int>(-2, 2)(rng), 0, n - 1);
      if (np == pos) np = (pos + 1) % n;
      c.decisions[i] = values[np];
    }
    if (c.decisions == base.decisions) continue;
    if (const Candidate* k = known ? known->Find(c.decisions) : nullptr) return *k;
    auto f = Finish(std::move(c));
    if (f.ok()) return f;
    last = f.status();
  }
  return last;
}

absl::StatusOr<Candidate> GpuSpace::FromTrace(const ir::Trace& trace) const {
  if (trace.sketch < 0 || trace.sketch >= num_sketches() || trace.target != "cuda") {
    return absl::InvalidArgumentError("trace was not produced by the gpu search space");
  }
  Candidate c;
  c.sketch = trace.sketch;
  c.decisions = trace.decisions;
  if (c.sketch == kFlatSketch && !c.decisions.empty()) {
    return absl::InvalidArgumentError("trace of the flat mapping has decisions");
  }
  if (c.sketch == kContractionSketch &&
      (c.decisions.size() != 1 || c.decisions[0] < 0 ||
       c.decisions[0] >= static_cast<int64_t>(variants_.size()))) {
    return absl::InvalidArgumentError("trace's contraction variant is not in this space");
  }
  return MatchesTrace(Finish(c), trace.instructions);
}

}  // namespace gpu_internal

absl::StatusOr<bool> ParseGpuMath(const std::string& math) {
  if (math == "fp32") return false;
  if (math == "tf32") return true;
  return absl::InvalidArgumentError("unknown gpu math '" + math + "' (expected fp32 or tf32)");
}

absl::StatusOr<GpuTarget> GpuTargetFor(const ir::Target& target) {
  if (target.kind != ir::TargetKind::kCuda) {
    return absl::InvalidArgumentError("target '" + target.ToString() +
                                      "' is not a cuda target (expected cuda, cuda:N or "
                                      "cuda:sm_XX)");
  }
  GpuTarget t;
  if (!target.arch.empty()) {
    t.arch = target.arch;
    return t;
  }
  const int ordinal = target.ordinal;
  auto driver = codegen::cuda::CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  auto info = (*driver)->Describe(ordinal);
  if (!info.ok()) return info.status();
  t.arch = info->arch();
  t.sm_count = info->sm_count;
  t.limits = info->limits;
  return t;
}

absl::StatusOr<std::unique_ptr<SearchSpace>> CreateGpuSearchSpace(const ir::Workload& workload,
                                                                  const GpuTarget& target) {
  auto s = std::make_unique<gpu_internal::GpuSpace>(workload, target);
  if (auto st = s->Init(); !st.ok()) return st;
  return std::unique_ptr<SearchSpace>(std::move(s));
}

}  // namespace lathe::tuner
