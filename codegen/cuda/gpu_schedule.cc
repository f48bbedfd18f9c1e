#include "codegen/cuda/gpu_schedule.h"

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/functor.h"

namespace lathe::codegen::cuda {

namespace {

using ir::Schedule;
using ir::Stage;

constexpr int64_t kDefaultThreads = 256;
// Statements an unrolled register-tile update may have (an 8x8 tile over a k-tile of 8).
constexpr int64_t kMaxUnrolledBody = 512;

std::vector<std::string> SpatialRoots(const Stage& s) {
  size_t n = s.tensor->axes.size();
  return {s.root_loops.begin(), s.root_loops.begin() + n};
}

std::vector<std::string> ReduceRoots(const Stage& s) {
  size_t n = s.tensor->axes.size();
  return {s.root_loops.begin() + n, s.root_loops.end()};
}

// Fuses `loops` (adjacent leaves, outermost first) unless there is only one.
absl::StatusOr<std::string> FuseAll(Schedule& sch, const std::string& stage,
                                    const std::vector<std::string>& loops) {
  if (loops.size() == 1) return loops[0];
  return sch.Fuse(stage, loops);
}

// Inlines the non-output "pad" stages (those for which `keep` says false).
template <typename Keep>
absl::Status InlinePads(Schedule& sch, Keep keep) {
  for (const std::string& n : GpuActiveStages(sch)) {
    const Stage* s = sch.FindStage(n);
    if (s->is_output || s->tensor->tag != "pad") continue;
    if (keep(n)) continue;
    if (auto st = sch.ComputeInline(n); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// Splits each axis by its tile, reorders level by level and binds: fused outer loops to
// blockIdx.x, the vthread loops, fused thread loops to threadIdx.x. `middle` (loops placed
// between the block and vthread levels, e.g. outer reduce loops) and `tail` (after the
// thread level) are reordered with them. Returns the fused thread loop and its extent.
absl::StatusOr<std::pair<std::string, int64_t>> Tile(Schedule& sch, const std::string& name,
                                                     const std::vector<std::string>& axes,
                                                     const std::vector<SpatialTile>& tiles,
                                                     const std::vector<std::string>& middle,
                                                     const std::vector<std::string>& tail,
                                                     bool unroll, int64_t vector = 1) {
  if (tiles.size() != axes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("stage '", name, "' has ", axes.size(),
                                                   " spatial axes, the tiling ", tiles.size()));
  }
  std::vector<std::vector<std::string>> level(4);
  int64_t threads = 1;
  for (size_t a = 0; a < axes.size(); ++a) {
    int64_t e = sch.FindStage(name)->loops.at(axes[a]).extent;
    std::vector<int64_t> f = {tiles[a].vthread, tiles[a].thread, tiles[a].inner};
    auto parts = sch.Split(name, axes[a], f);
    if (!parts.ok()) return parts.status();
    for (int l = 0; l < 4; ++l) level[l].push_back((*parts)[l]);
    threads *= SplitExtents(e, f)[2];
  }
  std::vector<std::string> order = level[0];
  order.insert(order.end(), middle.begin(), middle.end());
  for (int l = 1; l < 4; ++l) {
    order.insert(order.end(), level[l].begin(), level[l].end());
    if (l == 2) order.insert(order.end(), tail.begin(), tail.end());
  }
  if (auto st = sch.Reorder(name, order); !st.ok()) return st;
  auto b = FuseAll(sch, name, level[0]);
  if (!b.ok()) return b.status();
  if (auto st = sch.Bind(name, *b, "blockIdx.x"); !st.ok()) return st;
  for (const std::string& v : level[1]) {
    if (auto st = sch.Bind(name, v, "vthread"); !st.ok()) return st;
  }
  auto t = FuseAll(sch, name, level[2]);
  if (!t.ok()) return t.status();
  if (auto st = sch.Bind(name, *t, "threadIdx.x"); !st.ok()) return st;
  std::vector<std::string> inner = level[3];
  // The last axis's per-thread elements written `vector` at a time (float4 where the code
  // generator proves the alignment).
  const std::string& last = inner.back();
  int64_t last_extent =
      SplitExtents(sch.FindStage(name)->loops.at(axes.back()).extent,
                   {tiles.back().vthread, tiles.back().thread, tiles.back().inner})[3];
  if (vector > 1 && last_extent % vector == 0 && last_extent >= vector) {
    auto v = sch.Split(name, last, {vector});
    if (!v.ok()) return v.status();
    inner.back() = (*v)[0];
    if (auto st = sch.Vectorize(name, (*v)[1]); !st.ok()) return st;
  }
  if (unroll) {
    // Every per-thread loop: a register tile's indices must be constants.
    for (const std::string& l : inner) {
      if (sch.FindStage(name)->loops.at(l).kind == ir::ForKind::kSerial) {
        if (auto st = sch.Unroll(name, l); !st.ok()) return st;
      }
    }
  }
  return std::make_pair(*t, threads);
}

// The order of a shared copy's dimensions that puts those its consumer `reader` indexes by
// reduce variables alone first (a tile of A[i,k] stored [k][i]: a thread's rows are then
// consecutive for each k); empty when that is the order it has.
std::vector<std::string> ReduceMajorOrder(const Schedule& sch, const std::string& copy,
                                          const std::string& reader) {
  const Stage* c = sch.FindStage(copy);
  const Stage* r = sch.FindStage(reader);
  std::set<const ir::ExprNode*> reduce;
  for (const ir::IterVar& a : r->tensor->reduce_axes()) reduce.insert(a->var.get());
  size_t ndim = c->tensor->axes.size();
  std::vector<bool> reduce_only(ndim, false);
  bool found = false;
  ir::Visit(r->tensor->body, [&](const ir::Expr& x) {
    if (found || x->kind != ir::ExprKind::kTensorRead || x->name != copy) return;
    found = true;
    for (size_t d = 0; d < ndim && d < x->operands.size(); ++d) {
      bool any = false, other = false;
      ir::Visit(x->operands[d], [&](const ir::Expr& v) {
        if (v->kind != ir::ExprKind::kVar) return;
        (reduce.count(v.get()) ? any : other) = true;
      });
      reduce_only[d] = any && !other;
    }
  });
  std::vector<std::string> order, rest;
  for (size_t d = 0; d < ndim; ++d) {
    (reduce_only[d] ? order : rest).push_back(c->tensor->axes[d]->var->name);
  }
  order.insert(order.end(), rest.begin(), rest.end());
  for (size_t d = 0; d < ndim; ++d) {
    if (order[d] != c->tensor->axes[d]->var->name) return order;
  }
  return {};
}

// Cache-reads each input into shared memory for `reader`, laid out reduce-axis-major when
// asked. Returns the copies and, per copy, its loops in the input's own order.
absl::StatusOr<std::vector<std::pair<std::string, std::vector<std::string>>>> StageInShared(
    Schedule& sch, const std::vector<std::string>& inputs, const std::string& reader,
    bool reduce_major) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const std::string& in : inputs) {
    auto cr = sch.CacheRead(in, "shared", {reader});
    if (!cr.ok()) return cr.status();
    std::vector<std::string> natural = sch.FindStage(*cr)->leaves;
    if (reduce_major) {
      std::vector<std::string> order = ReduceMajorOrder(sch, *cr, reader);
      if (!order.empty()) {
        if (auto st = sch.StorageOrder(*cr, order); !st.ok()) return st;
      }
    }
    out.emplace_back(*cr, natural);
  }
  return out;
}

// Computes the shared copy `copy` at `loop` of `target` and spreads its fill over the block's
// `threads`, `vector` consecutive elements of the input's last dimension per thread and
// access (vectorized: float4 where the code generator proves the alignment), the loops taken
// in the input's own order so that neighbouring threads read neighbouring elements.
absl::Status Cooperative(Schedule& sch, const std::string& copy,
                         const std::vector<std::string>& natural, const std::string& target,
                         const std::string& loop, int64_t threads, int64_t vector) {
  if (auto st = sch.ComputeAt(copy, target, loop); !st.ok()) return st;
  if (natural.size() > 1) {
    if (auto st = sch.Reorder(copy, natural); !st.ok()) return st;
  }
  // A copy: Fuse changes the stage's leaves while it records its operands.
  std::vector<std::string> leaves = sch.FindStage(copy)->leaves;
  const int64_t last = sch.FindStage(copy)->loops.at(leaves.back()).extent;
  auto fused = FuseAll(sch, copy, leaves);
  if (!fused.ok()) return fused.status();
  if (vector > 1 && last % vector == 0) {
    auto parts = sch.Split(copy, *fused, {threads, vector});
    if (!parts.ok()) return parts.status();
    if (auto st = sch.Bind(copy, (*parts)[1], "threadIdx.x"); !st.ok()) return st;
    return sch.Vectorize(copy, (*parts)[2]);
  }
  auto parts = sch.Split(copy, *fused, {threads});
  if (!parts.ok()) return parts.status();
  return sch.Bind(copy, (*parts)[1], "threadIdx.x");
}

absl::Status TileLocal(Schedule& sch, const std::string& name, const ReductionTiling& t) {
  auto cw = sch.CacheWrite(name, "local");
  if (!cw.ok()) return cw.status();
  auto caches = StageInShared(sch, t.shared_inputs, *cw, t.reduce_major);
  if (!caches.ok()) return caches.status();
  const Stage* s = sch.FindStage(name);
  std::vector<std::string> axes = SpatialRoots(*s);
  auto tl = Tile(sch, name, axes, t.spatial, {}, {}, t.unroll_inner, t.vector);
  if (!tl.ok()) return tl.status();
  if (auto st = sch.ComputeAt(*cw, name, tl->first); !st.ok()) return st;
  const Stage* ls = sch.FindStage(*cw);
  std::vector<std::string> spatial = SpatialRoots(*ls), reduce = ReduceRoots(*ls), outer, inner;
  if (t.reduce_inner.size() != reduce.size()) {
    return absl::InvalidArgumentError(absl::StrCat("stage '", name, "' has ", reduce.size(),
                                                   " reduce axes, the tiling ",
                                                   t.reduce_inner.size()));
  }
  for (size_t r = 0; r < reduce.size(); ++r) {
    auto parts = sch.Split(*cw, reduce[r], {t.reduce_inner[r]});
    if (!parts.ok()) return parts.status();
    outer.push_back((*parts)[0]);
    inner.push_back((*parts)[1]);
  }
  std::vector<std::string> order = outer;
  order.insert(order.end(), inner.begin(), inner.end());
  order.insert(order.end(), spatial.begin(), spatial.end());
  if (auto st = sch.Reorder(*cw, order); !st.ok()) return st;
  // A k-tile of each staged input per innermost outer reduce step, fetched by the block.
  for (const auto& [copy, natural] : *caches) {
    if (outer.empty()) {
      return absl::InvalidArgumentError("stage '" + name + "' has no reduce loop to stage at");
    }
    if (auto st = Cooperative(sch, copy, natural, *cw, outer.back(), tl->second, t.vector);
        !st.ok()) {
      return st;
    }
  }
  if (t.unroll_local) {
    // The accumulator's loops (registers need constant indices), and the inner reduce loops
    // too when the unrolled body stays small enough for NVRTC to compile quickly.
    for (const std::string& l : spatial) {
      if (auto st = sch.Unroll(*cw, l); !st.ok()) return st;
    }
    int64_t body = 1;
    for (size_t a = 0; a < axes.size(); ++a) {
      body *= SplitExtents(s->loops.at(axes[a]).extent,
                           {t.spatial[a].vthread, t.spatial[a].thread, t.spatial[a].inner})[3];
    }
    for (size_t r = 0; r < reduce.size(); ++r) {
      body *= std::min(t.reduce_inner[r], sch.FindStage(*cw)->loops.at(inner[r]).extent);
    }
    if (!caches->empty() && body <= kMaxUnrolledBody) {
      for (const std::string& l : inner) {
        if (auto st = sch.Unroll(*cw, l); !st.ok()) return st;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status TileShared(Schedule& sch, const std::string& name, const ReductionTiling& t) {
  auto caches = StageInShared(sch, t.shared_inputs, name, t.reduce_major);
  if (!caches.ok()) return caches.status();
  const Stage* s = sch.FindStage(name);
  std::vector<std::string> axes = SpatialRoots(*s), reduce = ReduceRoots(*s), ro, ri;
  if (t.reduce_inner.size() != reduce.size()) {
    return absl::InvalidArgumentError(absl::StrCat("stage '", name, "' has ", reduce.size(),
                                                   " reduce axes, the tiling ",
                                                   t.reduce_inner.size()));
  }
  for (size_t r = 0; r < reduce.size(); ++r) {
    auto parts = sch.Split(name, reduce[r], {t.reduce_inner[r]});
    if (!parts.ok()) return parts.status();
    ro.push_back((*parts)[0]);
    ri.push_back((*parts)[1]);
  }
  auto tl = Tile(sch, name, axes, t.spatial, ro, ri, t.unroll_inner);
  if (!tl.ok()) return tl.status();
  for (const auto& [copy, natural] : *caches) {
    if (ro.empty()) {
      return absl::InvalidArgumentError("stage '" + name + "' has no reduce loop to stage at");
    }
    if (auto st = Cooperative(sch, copy, natural, name, ro.back(), tl->second, t.vector);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

// rfactor into shared partial results, one output element per block: the partials' factored
// axis runs on threadIdx.x; the stage itself runs on a threadIdx.x loop of extent 1, which
// the code generator guards, so thread 0 alone combines the partials and writes the result.
absl::Status CrossThread(Schedule& sch, const std::string& name, const ReductionTiling& t) {
  std::string axis = CrossThreadAxis(*sch.FindStage(name));
  if (axis.empty()) {
    return absl::InvalidArgumentError("stage '" + name + "' has no reduce axis to factor");
  }
  auto rf = sch.RFactor(name, axis, t.rf_threads);
  if (!rf.ok()) return rf.status();
  if (auto st = sch.StorageScope(*rf, "shared"); !st.ok()) return st;
  const Stage* s = sch.FindStage(name);
  std::vector<std::string> spatial = SpatialRoots(*s);
  if (spatial.empty()) {
    return absl::InvalidArgumentError("stage '" + name + "' has no spatial axis to spread");
  }
  auto fused = FuseAll(sch, name, spatial);
  if (!fused.ok()) return fused.status();
  auto parts = sch.Split(name, *fused, {1});
  if (!parts.ok()) return parts.status();
  if (auto st = sch.Bind(name, (*parts)[0], "blockIdx.x"); !st.ok()) return st;
  if (auto st = sch.Bind(name, (*parts)[1], "threadIdx.x"); !st.ok()) return st;
  if (auto st = sch.ComputeAt(*rf, name, (*parts)[0]); !st.ok()) return st;
  const Stage* rs = sch.FindStage(*rf);
  // The factored axis is the partial stage's first root loop.
  if (auto st = sch.Bind(*rf, rs->root_loops[0], "threadIdx.x"); !st.ok()) return st;
  std::vector<std::string> rred = ReduceRoots(*sch.FindStage(*rf));
  if (t.unroll_inner && !rred.empty()) return sch.Unroll(*rf, rred.back());
  return absl::OkStatus();
}

class RandomGpu {
 public:
  explicit RandomGpu(uint64_t seed) : rng_(seed), seed_(seed) {}

  absl::StatusOr<Schedule> Generate(const ir::Workload& w) {
    Schedule sch(w, "cuda");
    if (auto st = InlinePads(sch, [&](const std::string&) { return Uniform(0, 4) == 0; });
        !st.ok()) {
      return st;
    }
    for (const std::string& n : GpuActiveStages(sch)) {
      const Stage* s = sch.FindStage(n);
      absl::Status st;
      if (s->tensor->is_reduction()) {
        st = ApplyReductionTiling(sch, n, Sample(sch, *s));
      } else {
        static const int64_t kThreads[] = {32, 64, 128, 256, 512, 1024};
        int64_t inner = Coin(0.3) ? Pick({2, 4}) : 1;
        st = ApplyElementwiseMapping(sch, n, kThreads[Uniform(0, 5)], inner);
      }
      if (!st.ok()) {
        return absl::InternalError(absl::StrCat("random gpu schedule (seed ", seed_,
                                                ") for stage '", n, "': ", st.message()));
      }
    }
    return sch;
  }

 private:
  bool Coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  int64_t Pick(std::vector<int64_t> v) { return v[Uniform(0, static_cast<int64_t>(v.size()) - 1)]; }

  ReductionTiling Sample(const Schedule& sch, const Stage& s) {
    ReductionTiling t;
    bool local = Coin(0.5);
    t.kind = local ? ReductionTiling::Kind::kLocal : ReductionTiling::Kind::kShared;
    // Shared staging alone, or with register accumulation (half the local tilings).
    if (!local || Coin(0.5)) {
      const ir::Workload& w = sch.workload();
      for (const std::string& in : ir::ReadTensors(s.tensor->body)) {
        const ir::Tensor* tensor = w.Find(in);
        if (tensor && (*tensor)->is_placeholder() && Coin(0.75)) t.shared_inputs.push_back(in);
      }
    }
    t.vector = Coin(0.4) ? 4 : 1;
    t.reduce_major = Coin(0.5);
    // Threads go to the innermost axes first (coalesced accesses on the last axis), at most
    // 256 in all.
    std::vector<std::string> axes = SpatialRoots(s);
    t.spatial.resize(axes.size());
    int64_t threads = 1;
    for (size_t r = axes.size(); r-- > 0;) {
      int64_t e = s.loops.at(axes[r]).extent;
      SpatialTile& tile = t.spatial[r];
      tile.vthread = Coin(0.3) ? 2 : 1;
      int64_t cap = std::max<int64_t>(1, 256 / threads);
      int64_t want = Pick({1, 2, 4, 8, 16, 32, 64});
      while (tile.thread * 2 <= std::min({want, cap, e})) tile.thread *= 2;
      threads *= tile.thread;
      tile.inner = Pick({1, 1, 2, 4, 8});
    }
    // At most 64 outputs per thread (what registers hold; the search space estimates
    // registers the same way).
    auto per_thread = [&] {
      int64_t n = 1;
      for (const SpatialTile& tile : t.spatial) n *= tile.vthread * tile.inner;
      return n;
    };
    while (per_thread() > 64) {
      SpatialTile* big = &t.spatial[0];
      for (SpatialTile& tile : t.spatial) {
        if (tile.inner > big->inner) big = &tile;
      }
      if (big->inner > 1) {
        big->inner /= 2;
      } else {
        for (SpatialTile& tile : t.spatial) tile.vthread = 1;
      }
    }
    for (size_t r = 0; r < ReduceRoots(s).size(); ++r) {
      t.reduce_inner.push_back(local ? Pick({1, 2, 4, 8}) : Pick({1, 2, 4, 8, 16}));
    }
    t.unroll_inner = Coin(0.5);
    t.unroll_local = local && Coin(0.5);
    return t;
  }

  std::mt19937_64 rng_;
  uint64_t seed_;
};

}  // namespace

std::vector<std::string> GpuActiveStages(const Schedule& sch) {
  std::vector<std::string> out;
  for (const Stage& s : sch.stages()) {
    if (s.attach != ir::AttachKind::kInline) out.push_back(s.name);
  }
  return out;
}

std::vector<int64_t> SplitExtents(int64_t extent, const std::vector<int64_t>& factors) {
  std::vector<int64_t> out;
  int64_t cur = extent;
  for (size_t i = 0; i < factors.size(); ++i) {
    int64_t inner_prod = 1;
    for (size_t j = i; j < factors.size(); ++j) inner_prod *= factors[j];
    int64_t inner = std::min(inner_prod, cur);
    out.push_back((cur + inner - 1) / inner);
    cur = inner;
  }
  out.push_back(cur);
  return out;
}

std::string CrossThreadAxis(const Stage& s) {
  std::string best;
  int64_t best_extent = 0;
  for (const std::string& r : ReduceRoots(s)) {
    int64_t e = s.loops.at(r).extent;
    if (e >= best_extent) {
      best = r;
      best_extent = e;
    }
  }
  return best;
}

absl::Status ApplyReductionTiling(Schedule& sch, const std::string& stage,
                                  const ReductionTiling& t) {
  switch (t.kind) {
    case ReductionTiling::Kind::kLocal:
      return TileLocal(sch, stage, t);
    case ReductionTiling::Kind::kShared:
      return TileShared(sch, stage, t);
    case ReductionTiling::Kind::kCrossThread:
      return CrossThread(sch, stage, t);
  }
  return absl::InvalidArgumentError("unknown reduction tiling kind");
}

absl::Status ApplyElementwiseMapping(Schedule& sch, const std::string& name, int64_t threads,
                                     int64_t inner) {
  const Stage* s = sch.FindStage(name);
  if (!s) return absl::InvalidArgumentError("no stage '" + name + "'");
  std::vector<std::string> spatial = SpatialRoots(*s);
  if (spatial.empty()) return absl::OkStatus();
  int64_t extent = 1;
  for (const std::string& l : spatial) extent *= s->loops.at(l).extent;
  auto fused = FuseAll(sch, name, spatial);
  if (!fused.ok()) return fused.status();
  if (inner > 1 && extent >= inner * 2) {
    int64_t t = std::max<int64_t>(1, std::min(threads, extent / inner));
    auto parts = sch.Split(name, *fused, {t, inner});
    if (!parts.ok()) return parts.status();
    if (auto st = sch.Bind(name, (*parts)[0], "blockIdx.x"); !st.ok()) return st;
    if (auto st = sch.Bind(name, (*parts)[1], "threadIdx.x"); !st.ok()) return st;
    return sch.Unroll(name, (*parts)[2]);
  }
  int64_t t = std::min(threads, extent);
  auto parts = sch.Split(name, *fused, {t});
  if (!parts.ok()) return parts.status();
  if (auto st = sch.Bind(name, (*parts)[0], "blockIdx.x"); !st.ok()) return st;
  return sch.Bind(name, (*parts)[1], "threadIdx.x");
}

absl::StatusOr<Schedule> DefaultGpuSchedule(const ir::Workload& w) {
  Schedule sch(w, "cuda");
  if (auto st = InlinePads(sch, [](const std::string&) { return false; }); !st.ok()) return st;
  for (const std::string& n : GpuActiveStages(sch)) {
    if (auto st = ApplyElementwiseMapping(sch, n, kDefaultThreads, 1); !st.ok()) return st;
  }
  return sch;
}

absl::StatusOr<Schedule> RandomGpuSchedule(const ir::Workload& w, uint64_t seed) {
  RandomGpu gen(seed);
  return gen.Generate(w);
}

absl::Status CheckLaunchLimits(const LaunchPlan& plan, const GpuLimits& limits) {
  static const char* const kAxes[3] = {"x", "y", "z"};
  for (const KernelLaunch& k : plan.kernels) {
    if (k.threads_per_block() > limits.max_threads_per_block) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "kernel '", k.name, "' launches ", k.threads_per_block(),
          " threads per block; the device allows at most ", limits.max_threads_per_block));
    }
    for (int i = 0; i < 3; ++i) {
      if (k.block[i] > limits.max_block[i]) {
        return absl::ResourceExhaustedError(
            absl::StrCat("kernel '", k.name, "' has block dimension ", kAxes[i], " = ", k.block[i],
                         "; the device allows at most ", limits.max_block[i]));
      }
      if (k.grid[i] > limits.max_grid[i]) {
        return absl::ResourceExhaustedError(
            absl::StrCat("kernel '", k.name, "' has grid dimension ", kAxes[i], " = ", k.grid[i],
                         "; the device allows at most ", limits.max_grid[i]));
      }
    }
    if (k.shared_bytes > limits.max_shared_per_block) {
      return absl::ResourceExhaustedError(
          absl::StrCat("kernel '", k.name, "' needs ", k.shared_bytes,
                       " bytes of shared memory per block; the device allows at most ",
                       limits.max_shared_per_block));
    }
    if (k.dynamic_shared_bytes > 0 &&
        k.shared_bytes + k.dynamic_shared_bytes > limits.max_shared_optin) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "kernel '", k.name, "' needs ", k.shared_bytes + k.dynamic_shared_bytes,
          " bytes of shared memory per block (", k.dynamic_shared_bytes,
          " dynamic); the device allows at most ", limits.max_shared_optin, " with the opt-in"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lathe::codegen::cuda
