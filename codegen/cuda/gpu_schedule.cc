#include "codegen/cuda/gpu_schedule.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lathe::codegen::cuda {

namespace {

using ir::Schedule;
using ir::Stage;

constexpr int64_t kDefaultThreads = 256;

std::vector<std::string> ActiveStageNames(const Schedule& sch) {
  std::vector<std::string> out;
  for (const Stage& s : sch.stages()) {
    if (s.attach != ir::AttachKind::kInline) out.push_back(s.name);
  }
  return out;
}

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

// The extents lowering gives the loops of split(extent, factors): inner loops are clamped to
// what remains of the parent.
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

absl::Status InlinePads(Schedule& sch, bool all, std::mt19937_64* rng) {
  for (const std::string& n : ActiveStageNames(sch)) {
    const Stage* s = sch.FindStage(n);
    if (s->is_output || s->tensor->tag != "pad") continue;
    if (!all && std::uniform_int_distribution<int>(0, 4)(*rng) == 0) continue;
    if (auto st = sch.ComputeInline(n); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// Fuses the spatial loops of a root stage, splits them by `threads` (and an optional inner
// per-thread factor) and binds the parts to blockIdx.x / threadIdx.x.
absl::Status BindElementwise(Schedule& sch, const std::string& name, int64_t threads,
                             int64_t inner) {
  const Stage* s = sch.FindStage(name);
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

class RandomGpu {
 public:
  explicit RandomGpu(uint64_t seed) : rng_(seed) {}

  absl::StatusOr<Schedule> Generate(const ir::Workload& w) {
    Schedule sch(w, "cuda");
    if (auto st = InlinePads(sch, /*all=*/false, &rng_); !st.ok()) return st;
    for (const std::string& n : ActiveStageNames(sch)) {
      const Stage* s = sch.FindStage(n);
      absl::Status st;
      if (s->tensor->is_reduction()) {
        st = Coin(0.5) ? TileLocal(sch, n) : TileShared(sch, n);
      } else {
        static const int64_t kThreads[] = {32, 64, 128, 256, 512, 1024};
        int64_t inner = Coin(0.3) ? Pick({2, 4}) : 1;
        st = BindElementwise(sch, n, kThreads[Uniform(0, 5)], inner);
      }
      if (!st.ok()) {
        return absl::InternalError(absl::StrCat("random gpu schedule (seed ", seed_note_,
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

  // Spatial tile factors {vthread, thread, inner} for each axis, with at most `max_threads`
  // threads in all.
  std::vector<std::vector<int64_t>> SpatialFactors(const Stage& s,
                                                   const std::vector<std::string>& axes,
                                                   int64_t max_threads) {
    std::vector<std::vector<int64_t>> out;
    int64_t threads = 1;
    // Innermost axes first get the threads (coalesced accesses on the last axis).
    out.resize(axes.size());
    for (size_t r = axes.size(); r-- > 0;) {
      int64_t e = s.loops.at(axes[r]).extent;
      int64_t v = Coin(0.3) ? 2 : 1;
      int64_t t = 1;
      int64_t cap = std::max<int64_t>(1, max_threads / threads);
      int64_t want = Pick({1, 2, 4, 8, 16, 32, 64});
      while (t * 2 <= std::min({want, cap, e})) t *= 2;
      threads *= t;
      int64_t i = Pick({1, 1, 2, 4});
      out[r] = {v, t, i};
    }
    return out;
  }

  // Splits each axis by its factors, reorders level by level and binds: fused outer loops
  // to blockIdx.x, the vthread loops, fused thread loops to threadIdx.x. `middle` (loops
  // placed between the block and vthread levels, e.g. outer reduce loops) and `tail` (after
  // the thread level) are reordered with them. Returns the fused thread loop and its extent.
  absl::StatusOr<std::pair<std::string, int64_t>> Tile(
      Schedule& sch, const std::string& name, const std::vector<std::string>& axes,
      const std::vector<std::vector<int64_t>>& factors, const std::vector<std::string>& middle,
      const std::vector<std::string>& tail) {
    std::vector<std::vector<std::string>> level(4);
    int64_t threads = 1;
    for (size_t a = 0; a < axes.size(); ++a) {
      int64_t e = sch.FindStage(name)->loops.at(axes[a]).extent;
      auto parts = sch.Split(name, axes[a], factors[a]);
      if (!parts.ok()) return parts.status();
      for (int l = 0; l < 4; ++l) level[l].push_back((*parts)[l]);
      threads *= SplitExtents(e, factors[a])[2];
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
    if (Coin(0.5)) {
      if (auto st = sch.Unroll(name, level[3].back()); !st.ok()) return st;
    }
    return std::make_pair(*t, threads);
  }

  // Accumulation in registers: cache_write local, tile the copy stage, compute the local
  // stage at its thread loop with split reduce loops outside the spatial ones.
  absl::Status TileLocal(Schedule& sch, const std::string& name) {
    auto cw = sch.CacheWrite(name, "local");
    if (!cw.ok()) return cw.status();
    const Stage* s = sch.FindStage(name);
    std::vector<std::string> axes = SpatialRoots(*s);
    auto factors = SpatialFactors(*s, axes, 256);
    auto t = Tile(sch, name, axes, factors, {}, {});
    if (!t.ok()) return t.status();
    if (auto st = sch.ComputeAt(*cw, name, t->first); !st.ok()) return st;
    const Stage* ls = sch.FindStage(*cw);
    std::vector<std::string> spatial = SpatialRoots(*ls), outer, inner;
    for (const std::string& r : ReduceRoots(*ls)) {
      auto parts = sch.Split(*cw, r, {Pick({1, 2, 4, 8})});
      if (!parts.ok()) return parts.status();
      outer.push_back((*parts)[0]);
      inner.push_back((*parts)[1]);
    }
    std::vector<std::string> order = outer;
    order.insert(order.end(), inner.begin(), inner.end());
    order.insert(order.end(), spatial.begin(), spatial.end());
    if (auto st = sch.Reorder(*cw, order); !st.ok()) return st;
    if (!spatial.empty() && Coin(0.5)) return sch.Unroll(*cw, spatial.back());
    return absl::OkStatus();
  }

  // Shared-memory staging: inputs read through "shared" copies computed at the outer reduce
  // loop (outside the thread loops, so a copy holds the block's region), fetched by all the
  // block's threads; the stage accumulates in place.
  absl::Status TileShared(Schedule& sch, const std::string& name) {
    std::vector<std::string> caches;
    const ir::Workload& w = sch.workload();
    for (const std::string& t : ir::ReadTensors(sch.FindStage(name)->tensor->body)) {
      const ir::Tensor* tensor = w.Find(t);
      if (!tensor || !(*tensor)->is_placeholder() || !Coin(0.75)) continue;
      auto cr = sch.CacheRead(t, "shared", {name});
      if (!cr.ok()) return cr.status();
      caches.push_back(*cr);
    }
    const Stage* s = sch.FindStage(name);
    std::vector<std::string> axes = SpatialRoots(*s), ro, ri;
    auto factors = SpatialFactors(*s, axes, 256);
    for (const std::string& r : ReduceRoots(*s)) {
      auto parts = sch.Split(name, r, {Pick({1, 2, 4, 8, 16})});
      if (!parts.ok()) return parts.status();
      ro.push_back((*parts)[0]);
      ri.push_back((*parts)[1]);
    }
    auto t = Tile(sch, name, axes, factors, ro, ri);
    if (!t.ok()) return t.status();
    int64_t threads = t->second;
    for (const std::string& c : caches) {
      if (auto st = sch.ComputeAt(c, name, ro.back()); !st.ok()) return st;
      const Stage* cs = sch.FindStage(c);
      auto fused = FuseAll(sch, c, cs->leaves);
      if (!fused.ok()) return fused.status();
      auto parts = sch.Split(c, *fused, {threads});
      if (!parts.ok()) return parts.status();
      if (auto st = sch.Bind(c, (*parts)[1], "threadIdx.x"); !st.ok()) return st;
    }
    return absl::OkStatus();
  }

  std::mt19937_64 rng_;
  uint64_t seed_note_ = 0;

 public:
  void set_seed_note(uint64_t s) { seed_note_ = s; }
};

}  // namespace

absl::StatusOr<Schedule> DefaultGpuSchedule(const ir::Workload& w) {
  Schedule sch(w, "cuda");
  std::mt19937_64 unused(0);
  if (auto st = InlinePads(sch, /*all=*/true, &unused); !st.ok()) return st;
  for (const std::string& n : ActiveStageNames(sch)) {
    if (auto st = BindElementwise(sch, n, kDefaultThreads, 1); !st.ok()) return st;
  }
  return sch;
}

absl::StatusOr<Schedule> RandomGpuSchedule(const ir::Workload& w, uint64_t seed) {
  RandomGpu gen(seed);
  gen.set_seed_note(seed);
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
  }
  return absl::OkStatus();
}

}  // namespace lathe::codegen::cuda
