// The GPU space's rule (tuner/gpu_space_internal.h): Heuristic's ordered candidates, what an
// untuned workload gets first and what a search's first round measures. Each choice is fitted
// to a measurement on a GPU (bench/README.md, "bench_cuda (NVIDIA GPU)").
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codegen/cuda/contraction.h"
#include "codegen/cuda/gpu_schedule.h"
#include "ir/functor.h"
#include "tuner/gpu_space_internal.h"

namespace lathe::tuner::gpu_internal {

namespace {

// The rule's first candidate reduces across threads from this many reduced elements per output.
constexpr int64_t kCrossRuleMinReduce = 128;
// Split-K is the rule's first candidate for at most kSplitMaxOutputs outputs of a reduction of at
// least kSplitRuleMinReduce (PP-OCR rec's 1x3 convolutions over 960 and 480 channels: 2400 outputs
// of 2880 and 1440 products: on an H200, session 22, 0.192 / 0.107 ms one output per thread,
// 0.014 / 0.014 ms split).
constexpr int64_t kSplitMaxOutputs = 64 * 1024;
constexpr int64_t kSplitRuleMinReduce = 1024;
// DenseContraction: the least reduction, matrix side and outputs for which the contraction
// template comes before the flat mapping (K 64: a 1x1 convolution over 64 channels).
constexpr int64_t kDenseMinReduce = 64;
constexpr int64_t kDenseMinSide = 16;
constexpr int64_t kDenseMinOutputs = 16 * 1024;

}  // namespace

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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace lathe::tuner::gpu_internal
