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

namespace lathe::tuner {

namespace {

using codegen::cuda::ReductionTiling;
using codegen::cuda::SpatialTile;
using codegen::cuda::SplitExtents;
using ir::Schedule;
using ir::Stage;

// Which decisions a slot's value matters under; the others are carried along unchanged so
// that mutation only touches decisions that change the program.
enum class Need { kAlways, kKept, kTiled, kLocal, kStaged, kCross };

struct Slot {
  std::string name;
  std::vector<int64_t> choices;
  int stage = -1;
  Need need = Need::kAlways;
};

// Kinds of the "kind" slot of a reduction stage.
constexpr int64_t kLocal = 0, kShared = 1, kCross = 2;

// The sketches: 0 loop tiling (the slots below), 1 the contraction templates (variants_), 2 the
// flat mapping (DefaultGpuSchedule: every stage one output per thread, 256 threads per block; no
// decisions).
constexpr int kTiledSketch = 0, kContractionSketch = 1, kFlatSketch = 2;

// Few outputs with a long reduction: worth a cross-thread reduction.
constexpr int64_t kCrossMaxOutputs = 8192;
constexpr int64_t kCrossMinReduce = 8;
// The rule's first candidate reduces across threads from this many reduced elements per output.
constexpr int64_t kCrossRuleMinReduce = 128;
// Registers a thread needs beyond its accumulator and operands (indices, loop counters).
constexpr int64_t kBaseRegisters = 24;

// One stage of the workload with the slots of its decisions.
struct StagePlan {
  std::string name;
  bool reduction = false;
  bool pad = false;
  std::vector<int64_t> spatial;     // extents of the spatial axes
  std::vector<std::string> inputs;  // placeholders it may read (paddings inlined)
  int pad_slot = -1;                // pads: 0 inline, 1 root
  // Reductions.
  int kind_slot = -1;
  std::vector<int> vt, th, in, k, smem;
  int unroll_slot = -1, unroll_local_slot = -1, rf_slot = -1, vec_slot = -1, layout_slot = -1;
  // Elementwise stages.
  int threads_slot = -1, inner_slot = -1;
};

std::vector<int64_t> PowersOfTwoUpTo(int64_t limit) {
  std::vector<int64_t> out;
  for (int64_t p = 1; p <= std::max<int64_t>(limit, 1); p *= 2) out.push_back(p);
  return out;
}

class GpuSpace : public SearchSpace {
 public:
  GpuSpace(ir::Workload w, GpuTarget t) : workload_(std::move(w)), target_(std::move(t)) {}

  absl::Status Init();
  const ir::Workload& workload() const override { return workload_; }
  int num_sketches() const override { return 3; }
  ir::TargetKind target_kind() const override { return ir::TargetKind::kCuda; }
  absl::StatusOr<Schedule> Apply(const Candidate& c) const override;
  absl::StatusOr<Candidate> Sample(std::mt19937_64& rng) const override;
  using SearchSpace::Mutate;
  absl::StatusOr<Candidate> Mutate(const Candidate& c, std::mt19937_64& rng,
                                   const KnownCandidates* known) const override;
  absl::StatusOr<Candidate> FromTrace(const ir::Trace& trace) const override;
  std::vector<Candidate> Heuristic(int max) const override;

 private:
  int AddSlot(std::string name, std::vector<int64_t> choices, int stage, Need need) {
    slots_.push_back({std::move(name), std::move(choices), stage, need});
    return static_cast<int>(slots_.size()) - 1;
  }
  bool Relevant(const std::vector<int64_t>& d, const Slot& s) const;
  // Device-limit checks of an applied candidate: its launch plan and its register estimate.
  absl::Status CheckLimits(const Candidate& c, const Schedule& sch) const;
  absl::StatusOr<Candidate> Finish(Candidate c) const;
  // The contraction sketch (1): decisions {index into variants_}.
  void InitContraction();
  absl::StatusOr<Schedule> ApplyContraction(const Candidate& c) const;
  std::vector<Candidate> ContractionHeuristic(bool mma, int max) const;
  // Blocks a contraction variant launches.
  int64_t ContractionBlocks(const std::vector<int64_t>& params) const;
  // Whether the contraction is large enough for the register-tiled rules to pay (see Heuristic).
  bool LargeContraction() const;
  bool SplitContraction() const;
  bool DenseContraction() const;
  // The loop-tiling candidate of one output per thread in which every reduction with few
  // outputs and a long reduce axis is a cross-thread reduction; nullopt when none is.
  std::optional<Candidate> CrossCandidate() const;
  // The untransformed stage that `p` plans.
  const Stage& WorkloadStage(const StagePlan& p) const {
    return *std::find_if(workload_stages_.begin(), workload_stages_.end(),
                         [&](const Stage& x) { return x.name == p.name; });
  }

  struct Variant {
    const char* name;             // the kernel template
    std::vector<int64_t> params;  // its tile shape
  };
  // A cp.async template (contraction_*_async).
  static int64_t Splits(const Variant& v) { return v.params.size() > 6 ? v.params[6] : 1; }
  static bool IsAsync(const Variant& v) {
    return v.name == std::string(codegen::cuda::kContractionMmaTf32Async) ||
           v.name == std::string(codegen::cuda::kContractionFmaAsync);
  }
  std::vector<Variant> variants_;  // empty: no contraction sketch
  std::string contraction_stage_;
  int64_t gemm_m_ = 0, gemm_n_ = 0, gemm_k_ = 0, gemm_batches_ = 1;

  ir::Workload workload_;
  GpuTarget target_;
  std::vector<Stage> workload_stages_;  // the untransformed stages (axes, extents)
  std::vector<StagePlan> stages_;
  std::vector<Slot> slots_;
};

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
// Split-K is offered from this long a reduction, and is the rule's first candidate for at most
// kSplitMaxOutputs outputs of a reduction of at least kSplitRuleMinReduce (PP-OCR rec's 1x3
// convolutions over 960 and 480 channels: 2400 outputs of 2880 and 1440 products; on an H100
// the flat mapping took 0.21 ms for the first, one thread per output; unmeasured split).
constexpr int64_t kSplitMinReduce = 256;
constexpr int64_t kSplitMaxOutputs = 64 * 1024;
constexpr int64_t kSplitRuleMinReduce = 1024;
// DenseContraction: the least reduction, matrix side and outputs for which the contraction
// template comes before the flat mapping (K 64: a 1x1 convolution over 64 channels).
constexpr int64_t kDenseMinReduce = 64;
constexpr int64_t kDenseMinSide = 16;
constexpr int64_t kDenseMinOutputs = 16 * 1024;

// The compute capability of an architecture name ("sm_90" -> 90; 0 when it is not one).
int ComputeCapability(const std::string& arch) {
  return arch.size() > 3 ? std::atoi(arch.c_str() + 3) : 0;
}

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

// The contraction's tile shapes: those that launch at least a block per SM first (a tile too
// large for the problem leaves most of the GPU idle: the ResNet 3x3 convolution at n=8 on an
// H100 took 0.222 ms in 128x128 tiles, 49 blocks, and 0.151 ms in 64x64 tiles, 196 blocks;
// cuDNN 0.111), then the least padded work; within 10% of each other the larger tile (more
// reuse per staged element), the deeper k-tile (SGEMM 4096: 3.74 ms with 16-deep k-tiles,
// 3.98 with 8-deep), then the unpipelined one (fewer registers). The cp.async templates come
// before the register-staged ones of about the same padding (up to 1.4x the padded work): the
// session-18 TF32 kernel (register-staged, one shared buffer) ran at 62 TFLOP/s, 0.17x
// cuBLAS, bound by its global loads; the pipelined one keeps 2 k-tiles in flight per block and
// reads fragments without bank conflicts (argued from ptxas and the SASS, not yet measured).
std::vector<Candidate> GpuSpace::ContractionHeuristic(bool mma, int max) const {
  std::vector<std::pair<double, int>> order;
  for (size_t i = 0; i < variants_.size(); ++i) {
    const Variant& v = variants_[i];
    if (codegen::cuda::IsTf32ContractionTemplate(v.name) != mma) continue;
    const bool async = IsAsync(v);
    const int64_t bm = v.params[0], bn = v.params[1];
    const double padded = static_cast<double>((gemm_m_ + bm - 1) / bm * bm) *
                          static_cast<double>((gemm_n_ + bn - 1) / bn * bn);
    const double waste = padded / (static_cast<double>(gemm_m_) * static_cast<double>(gemm_n_));
    const double blocks = static_cast<double>(ContractionBlocks(v.params));
    const bool fills = blocks >= target_.sm_count;
    // How evenly the blocks spread over the SMs: ResNet's 3x3 convolution at n=8 (N = 6272
    // pixels, M = 128 channels) makes 196 blocks of 64x64 (64 SMs do two, 68 one: 74%) and 392
    // of 64x32 (99%); a block's k-loop is issue-bound (ptxas sm_90: 456 instructions per 256
    // FFMA), so the SMs with more blocks set the time.
    const double sms = static_cast<double>(target_.sm_count);
    const double spread = blocks / (std::ceil(blocks / sms) * sms);
    // Split-K costs a pass over the partial sums and a launch: the fewest splits that fill the
    // SMs, and none only to even out the blocks. Of
    // those that do not fill the SMs, the closest to filling them. Larger tiles reuse each
    // staged element more (half a point per doubling: 128x128 beats 64x32 at 4096^3, whose
    // tails differ by 1.5%, but not a 26% tail).
    order.push_back({(fills ? 5.0 * (1.0 - spread) : 100.0 - 5.0 * blocks / sms) +
                         std::ceil(waste * 10) - (async ? 4.0 : 0.0) +
                         (fills ? 1.5 : 0.25) * std::log2(static_cast<double>(Splits(v))) -
                         0.5 * std::log2(static_cast<double>(bm * bn) / 4096.0) -
                         1e-8 * static_cast<double>(v.params[2]) +
                         1e-9 * static_cast<double>(v.params[5]),
                     static_cast<int>(i)});
  }
  std::sort(order.begin(), order.end());
  std::vector<Candidate> out;
  for (const auto& [score, i] : order) {
    if (static_cast<int>(out.size()) >= max) break;
    Candidate c;
    c.sketch = kContractionSketch;
    c.decisions = {i};
    auto f = Finish(std::move(c));
    if (f.ok()) out.push_back(std::move(*f));
  }
  return out;
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

// The largest choice of `slot` that is at most `want` (its smallest when none is).
int64_t Closest(const std::vector<int64_t>& choices, int64_t want) {
  int64_t best = *std::min_element(choices.begin(), choices.end());
  for (int64_t c : choices) {
    if (c <= want && c > best) best = c;
  }
  return best;
}

// The spatial axis a reduction's innermost axis is tiled with, as a GEMM tiles rows with
// columns: the innermost other axis that indexes different inputs (a matmul's i beside j, a
// convolution's output channels beside its columns, in NCHW as in NHWC), so that the block's
// two tiles of inputs are each reused across the other axis. Without one (pooling), the second
// innermost axis.
size_t GemmPartnerAxis(const Stage& st) {
  const ir::Tensor& t = st.tensor;
  const size_t nsp = t->axes.size();
  if (nsp < 2) return nsp;
  // For each spatial axis, the names of the tensors whose reads it indexes.
  std::vector<std::set<std::string>> reads(nsp);
  ir::Visit(t->body, [&](const ir::Expr& e) {
    if (e->kind != ir::ExprKind::kTensorRead) return;
    for (size_t a = 0; a < nsp; ++a) {
      for (const ir::Expr& index : e->operands) {
        if (ir::UsesVar(index, t->axes[a]->var.get())) reads[a].insert(e->name);
      }
    }
  });
  for (size_t a = nsp - 1; a-- > 0;) {
    if (!reads[a].empty() && reads[a] != reads[nsp - 1]) return a;
  }
  return nsp - 2;
}

// The shape of a good hand-written GEMM kernel, scaled to the workload: each reduction's
// innermost spatial axis and its GEMM partner (GemmPartnerAxis) tiled `threads` x `threads` threads
// of `inner` x `inner` outputs each in registers (a 128x128 block tile from 16x16 threads of 8x8),
// its longest reduce axis cut into k-tiles of `ktile` staged in shared memory (every input, stored
// reduce-axis-major so a thread reads its rows consecutively), fetched cooperatively `vec` elements
// at a time, every per-thread loop unrolled; elementwise stages 256 threads.
std::vector<Candidate> GpuSpace::Heuristic(int max) const {
  struct Variant {
    int64_t threads, inner, ktile, vec;
  };
  // The 16-deep k-tile first: SGEMM 4096^3 on an H100 (bench_cuda, session 11) took 3.74 ms
  // with it against 3.98 ms for the 8-deep one (cuBLAS 2.66 ms); the others 4.0-5.4 ms.
  static constexpr Variant kVariants[] = {{16, 8, 16, 4}, {16, 8, 8, 4}, {16, 4, 8, 4},
                                          {8, 8, 8, 4},   {8, 4, 16, 4}, {16, 8, 8, 1}};
  std::vector<Candidate> out;
  auto add = [&](Candidate c) {
    if (static_cast<int>(out.size()) >= max) return;
    for (const Candidate& o : out) {
      if (o.sketch == c.sketch && o.decisions == c.decisions) return;
    }
    out.push_back(std::move(c));
  };
  auto flat = [&]() -> std::optional<Candidate> {
    Candidate c;
    c.sketch = kFlatSketch;
    auto f = Finish(std::move(c));
    if (!f.ok()) return std::nullopt;
    return *std::move(f);
  };
  // Work too small to fill the GPU with register tiles (every layer of PP-OCR det, rec and cls
  // at batch 1): the flat mapping first, after cross-thread reductions where few outputs reduce
  // long axes. On an H100 (session 18) the tiled rules lost to the flat mapping on every such
  // layer but the long reductions (rec 21.06 ms against 1.66 with the flat mapping; its softmax
  // over 6625 classes 15.96 ms against 0.22; det's global average pools 1.27 ms flat, 0.31
  // tiled).
  const bool large = LargeContraction();
  // Few outputs of a long reduction: split-K before the flat mapping (one thread per output
  // walks the whole reduction).
  if (!large && (SplitContraction() || DenseContraction())) {
    for (Candidate& c : ContractionHeuristic(target_.tf32, max)) add(std::move(c));
  }
  if (!large) {
    if (std::optional<Candidate> c = CrossCandidate()) add(*std::move(c));
    if (std::optional<Candidate> c = flat()) add(*std::move(c));
  }
  // TF32 tensor cores first where the user allows them; a convolution as an implicit GEMM
  // before the loop-tiling rule (whose convolutions were all slower than the default schedule
  // on an H100, issue 30); a matmul's fp32 FMA template after that rule (0.71x cuBLAS).
  if (!variants_.empty()) {
    if (target_.tf32) {
      for (Candidate& c : ContractionHeuristic(true, max)) add(std::move(c));
    }
    if (workload_.spec.op == "conv2d") {
      for (Candidate& c : ContractionHeuristic(false, max)) add(std::move(c));
    }
    // A large matmul: the pipelined FMA template before the loop-tiling rule. ptxas (sm_90) at
    // SGEMM 4096: its k-tile loop is 1024 FFMA of 1197 instructions (86%), 64 LDS.128, one
    // barrier, 128 registers, 2 blocks/SM; the tiling rule's (0.71x cuBLAS, session 18) 64
    // FFMA of 136 (47%) with two barriers and its global loads unoverlapped. Unmeasured.
    if (large && !target_.tf32 && workload_.spec.op != "conv2d") {
      for (Candidate& c : ContractionHeuristic(false, 1)) {
        if (IsAsync(variants_[c.decisions[0]])) add(std::move(c));
      }
    }
  }
  for (const Variant& v : kVariants) {
    if (static_cast<int>(out.size()) >= max) break;
    Candidate c;
    c.sketch = kTiledSketch;
    for (const Slot& slot : slots_) c.decisions.push_back(slot.choices.front());
    auto set = [&](int slot, int64_t want) {
      if (slot >= 0) c.decisions[slot] = Closest(slots_[slot].choices, want);
    };
    for (const StagePlan& p : stages_) {
      if (!p.reduction) {
        set(p.threads_slot, 256);
        set(p.inner_slot, 1);
        continue;
      }
      c.decisions[p.kind_slot] = kLocal;
      const size_t nsp = p.spatial.size();
      const Stage& st = WorkloadStage(p);
      const size_t second = GemmPartnerAxis(st);
      for (size_t a = 0; a < nsp; ++a) {
        set(p.vt[a], 1);
        if (a + 1 != nsp && a != second) {  // the other axes (a batch, rows): one per block
          set(p.th[a], 1);
          set(p.in[a], 1);
          continue;
        }
        const int64_t e = p.spatial[a];
        const int64_t inner = Closest(slots_[p.in[a]].choices, std::min(v.inner, e));
        set(p.in[a], inner);
        set(p.th[a], std::min(v.threads, (e + inner - 1) / inner));
      }
      const std::string longest = codegen::cuda::CrossThreadAxis(st);
      for (size_t r = 0; r < p.k.size(); ++r) {
        const std::string& axis = st.root_loops[nsp + r];
        set(p.k[r], axis == longest ? std::min(v.ktile, st.loops.at(axis).extent) : 1);
      }
      for (int m : p.smem) set(m, 1);
      set(p.vec_slot, v.vec);
      set(p.layout_slot, 1);
      set(p.unroll_slot, 1);
      set(p.unroll_local_slot, 1);
    }
    auto f = Finish(std::move(c));
    if (f.ok()) add(*std::move(f));
  }
  if (!variants_.empty() && !target_.tf32 && workload_.spec.op != "conv2d") {
    for (Candidate& c : ContractionHeuristic(false, max)) add(std::move(c));
  }
  if (large) {
    if (std::optional<Candidate> c = flat()) add(*std::move(c));
  }
  return out;
}

// Register tiles pay where the GEMM is large in all three dimensions and a tile of the
// contraction template still gives every SM a block: SGEMM 4096^3 (0.72x cuBLAS against 0.06x
// flat) and the ResNet 3x3 convolution at n=8 (M 128, N 6272, K 1152: 0.15-0.26 ms against 0.30
// flat) on an H100; not PP-OCR's layers (M or N 24-96, K 24-960, or a few hundred pixels).
bool GpuSpace::LargeContraction() const {
  if (variants_.empty() || std::min(gemm_m_, gemm_n_) < 64 || gemm_k_ < 256) return false;
  for (const Variant& v : variants_) {
    if (!codegen::cuda::IsTf32ContractionTemplate(v.name) && Splits(v) == 1 &&
        ContractionBlocks(v.params) >= target_.sm_count) {
      return true;
    }
  }
  return false;
}

// A contraction too small for LargeContraction's tiles to fill the GPU, but with enough of
// every dimension for a register tile to reuse what it stages: the contraction template
// before the flat mapping. On an H200 (session 22, `lathe tune --model det --target cuda`)
// PP-OCR det's 1x1 convolution 192 -> 42 at 40x40 (M 42, N 1600, K 192) took 28.6 us in 64x64
// tiles of the register-staged template (25 blocks) against 75.3 us flat, and the loop-tiling
// sketch beat the flat mapping on its 3x3 96 -> 24 convolutions at 160x160 (143 against 185
// us), where one thread per output re-reads every input it shares with its neighbours.
bool GpuSpace::DenseContraction() const {
  return !variants_.empty() && gemm_k_ >= kDenseMinReduce &&
         std::min(gemm_m_, gemm_n_) >= kDenseMinSide &&
         gemm_m_ * gemm_n_ * gemm_batches_ >= kDenseMinOutputs;
}

// Split-K first: few outputs of a long reduction, a split variant at hand.
bool GpuSpace::SplitContraction() const {
  if (gemm_k_ < kSplitRuleMinReduce || gemm_m_ * gemm_n_ * gemm_batches_ > kSplitMaxOutputs) {
    return false;
  }
  for (const Variant& v : variants_) {
    if (Splits(v) > 1) return true;
  }
  return false;
}

// Whether some read of `st` indexes its innermost dimension with reduce axis `axis`: a block
// of threads reducing along it reads consecutive addresses. On an H100 (session 18) cross-thread
// reductions along such an axis beat one output per thread 4-18x (rec's softmax over 6625
// classes 0.26 -> 0.06 ms, det's global average pools 2.38 -> 0.13 ms, ResNet-18's classifier
// 0.18 -> 0.02 ms); along a convolution's channels (strided by the image) they lost 8x (rec's
// 1x3 convolutions of 960 channels, 0.21 -> 1.61 ms).
bool ReadsAlongInnermost(const ir::Workload& w, const Stage& st, const std::string& axis) {
  const size_t nsp = st.tensor->axes.size();
  const std::vector<ir::IterVar>& reduce = st.tensor->reduce_axes();
  const ir::ExprNode* var = nullptr;
  for (size_t r = 0; r < reduce.size() && nsp + r < st.root_loops.size(); ++r) {
    if (st.root_loops[nsp + r] == axis) var = reduce[r]->var.get();
  }
  if (var == nullptr) return false;
  bool along = false;
  ir::Visit(st.tensor->body, [&](const ir::Expr& e) {
    if (e->kind != ir::ExprKind::kTensorRead || e->operands.empty()) return;
    // The innermost dimension of extent > 1: a 1x1 convolution over a 1x1 image (an SE
    // block's squeeze and excite) reads its channels consecutively though its last index is x.
    size_t d = e->operands.size() - 1;
    if (const ir::Tensor* t = w.Find(e->name)) {
      while (d > 0 && d < (*t)->shape.size() && (*t)->shape[d] == 1) --d;
    }
    if (ir::UsesVar(e->operands[d], var)) along = true;
  });
  return along;
}

std::optional<Candidate> GpuSpace::CrossCandidate() const {
  Candidate c;
  c.sketch = kTiledSketch;
  for (const Slot& slot : slots_) c.decisions.push_back(slot.choices.front());
  auto set = [&](int slot, int64_t want) {
    if (slot >= 0) c.decisions[slot] = Closest(slots_[slot].choices, want);
  };
  bool any = false;
  for (const StagePlan& p : stages_) {
    if (p.pad) continue;  // inlined
    if (!p.reduction) {
      set(p.threads_slot, 256);
      set(p.inner_slot, 1);
      continue;
    }
    const Stage& st = WorkloadStage(p);
    int64_t reduce = 1;
    for (size_t r = p.spatial.size(); r < st.root_loops.size(); ++r) {
      reduce *= st.loops.at(st.root_loops[r]).extent;
    }
    const std::vector<int64_t>& kinds = slots_[p.kind_slot].choices;
    const std::string axis = codegen::cuda::CrossThreadAxis(st);
    if (std::find(kinds.begin(), kinds.end(), kCross) != kinds.end() &&
        reduce >= kCrossRuleMinReduce && !axis.empty() &&
        ReadsAlongInnermost(workload_, st, axis)) {
      c.decisions[p.kind_slot] = kCross;
      set(p.rf_slot, std::min<int64_t>(256, st.loops.at(axis).extent));
      any = true;
      continue;
    }
    // One output per thread, the threads on the innermost axes.
    c.decisions[p.kind_slot] = kLocal;
    int64_t budget = 256;
    for (size_t a = p.spatial.size(); a-- > 0;) {
      set(p.vt[a], 1);
      set(p.in[a], 1);
      set(p.th[a], std::min(budget, p.spatial[a]));
      budget = std::max<int64_t>(1, budget / c.decisions[p.th[a]]);
    }
    for (int k : p.k) set(k, 1);
    for (int m : p.smem) set(m, 0);
  }
  if (!any) return std::nullopt;
  auto f = Finish(std::move(c));
  if (!f.ok()) return std::nullopt;
  return *std::move(f);
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

}  // namespace

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
  auto s = std::make_unique<GpuSpace>(workload, target);
  if (auto st = s->Init(); !st.ok()) return st;
  return std::unique_ptr<SearchSpace>(std::move(s));
}

}  // namespace lathe::tuner
