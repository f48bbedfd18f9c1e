// Random valid schedules for property tests of lowering and code generation: a seeded
// generator that applies random primitives to any workload through the Schedule API (a
// failing one is shrunk by minimize_trace.h).
//
// The generator works in phases, because the order of primitives matters:
//   1. structure: compute_inline of injective non-output stages, cache_read of inputs for one
//      consumer, cache_write and rfactor of untransformed reductions;
//   2. loops, consumers before producers: splits (dividing or not, multi-level, factor 1,
//      factors over the extent), reorders, fuses, then parallel / vectorize / unroll;
//   3. attachment, consumers before producers: compute_at of a producer into a random leaf
//      loop of a stage that holds all its consumers, once every target's loops are final.
// A primitive that the schedule refuses is skipped (the schedule is unchanged) and counted.
// Only CPU primitives are used (never bind).
#ifndef LATHE_TESTS_CODEGEN_RANDOM_SCHEDULE_H_
#define LATHE_TESTS_CODEGEN_RANDOM_SCHEDULE_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ir/schedule.h"
#include "ir/trace.h"
#include "ir/workload.h"

namespace lathe::testing {

// How many primitives the generator tried and how many the schedule refused.
struct RandomScheduleStats {
  int attempts = 0;
  int failures = 0;
  std::vector<std::string> failure_messages;  // the first few, for diagnosis
};

class RandomScheduler {
 public:
  RandomScheduler(uint64_t seed, RandomScheduleStats* stats) : rng_(seed), stats_(stats) {}

  ir::Schedule Generate(const ir::Workload& w) {
    ir::Schedule sch(w, "cpu");
    Structure(sch);
    std::vector<std::string> names = StageNames(sch);
    for (auto it = names.rbegin(); it != names.rend(); ++it) Loops(sch, *it);
    for (auto it = names.rbegin(); it != names.rend(); ++it) Attach(sch, *it);
    return sch;
  }

 private:
  bool Coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int64_t Uniform(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(Uniform(0, static_cast<int64_t>(v.size()) - 1))];
  }

  void Count(const absl::Status& s) {
    ++stats_->attempts;
    if (s.ok()) return;
    ++stats_->failures;
    if (stats_->failure_messages.size() < 8) {
      stats_->failure_messages.push_back(std::string(s.message()));
    }
  }

  static std::vector<std::string> StageNames(const ir::Schedule& sch) {
    std::vector<std::string> out;
    for (const ir::Stage& s : sch.stages()) {
      if (s.attach != ir::AttachKind::kInline) out.push_back(s.name);
    }
    return out;
  }

  // A factor for a loop of extent `e`: small ones, dividing ones, non-dividing ones, 1, the
  // extent itself and more than the extent.
  int64_t Factor(int64_t e) {
    switch (Uniform(0, 7)) {
      case 0:
        return 1;
      case 1:
        return e;
      case 2:
        return e + Uniform(1, 5);
      case 3: {
        std::vector<int64_t> divs;
        for (int64_t d = 2; d < e; ++d) {
          if (e % d == 0) divs.push_back(d);
        }
        return divs.empty() ? std::max<int64_t>(1, e) : Pick(divs);
      }
      case 4:
        return std::max<int64_t>(1, Uniform(1, std::max<int64_t>(1, e)));
      default:
        return Pick(std::vector<int64_t>{2, 3, 4, 5, 7, 8, 16});
    }
  }

  void Structure(ir::Schedule& sch) {
    const ir::Workload& w = sch.workload();
    // Inline injective intermediates first: a later cache_read must name live consumers.
    for (const std::string& name : StageNames(sch)) {
      const ir::Stage* s = sch.FindStage(name);
      const std::string& tag = s->tensor->tag;
      if (s->is_output || (tag != "pad" && tag != "elementwise") || !Coin(0.4)) continue;
      Count(sch.ComputeInline(name));
    }
    for (size_t a = 0; a + 1 < w.args.size(); ++a) {
      if (!Coin(0.3)) continue;
      std::vector<std::string> consumers = sch.Consumers(w.args[a]->name);
      if (consumers.empty()) continue;
      std::string scope = Coin(0.7) ? "local" : "shared";
      Count(sch.CacheRead(w.args[a]->name, scope, {Pick(consumers)}).status());
    }
    for (const std::string& name : StageNames(sch)) {
      const ir::Stage* s = sch.FindStage(name);
      if (!s->tensor->is_reduction()) continue;
      std::string target = name;
      if (Coin(0.35)) {
        auto c = sch.CacheWrite(name, "local");
        Count(c.status());
        if (c.ok()) target = *c;  // the reduction now lives in the cache stage
      }
      if (Coin(0.3)) {
        std::vector<std::pair<std::string, int64_t>> axes;
        for (const ir::IterVar& iv : sch.FindStage(target)->tensor->reduce_axes()) {
          if (iv->extent > 1) axes.push_back({iv->var->name, iv->extent});
        }
        if (!axes.empty()) {
          auto [axis, ext] = Pick(axes);
          int64_t f = Coin(0.2) ? ext + 1 : Uniform(2, std::max<int64_t>(2, ext));
          Count(sch.RFactor(target, axis, f).status());
        }
      }
    }
    for (const std::string& name : StageNames(sch)) {
      const ir::Stage* s = sch.FindStage(name);
      if (s->is_output || !Coin(0.1)) continue;
      Count(sch.StorageScope(name, Coin(0.5) ? "local" : "global"));
    }
  }

  std::vector<std::string> Leaves(const ir::Schedule& sch, const std::string& stage) {
    return sch.FindStage(stage)->leaves;
  }
  const ir::LoopInfo& Loop(const ir::Schedule& sch, const std::string& stage,
                           const std::string& loop) {
    return *sch.FindStage(stage)->FindLoop(loop);
  }

  void Loops(ir::Schedule& sch, const std::string& stage) {
    int ops = static_cast<int>(Uniform(0, 6));
    for (int n = 0; n < ops; ++n) {
      std::vector<std::string> leaves = Leaves(sch, stage);
      int64_t kind = Uniform(0, 9);
      if (kind < 5) {  // split, one or two levels
        const std::string& l = Pick(leaves);
        int64_t e = Loop(sch, stage, l).extent;
        std::vector<int64_t> f = {Factor(e)};
        if (Coin(0.35)) f.push_back(Factor(std::max<int64_t>(1, f[0] / 2)));
        Count(sch.Split(stage, l, f).status());
      } else if (kind < 8) {  // reorder a random subset
        std::vector<std::string> sub;
        for (const std::string& l : leaves) {
          if (Coin(0.6)) sub.push_back(l);
        }
        if (sub.size() < 2) continue;
        std::shuffle(sub.begin(), sub.end(), rng_);
        Count(sch.Reorder(stage, sub));
      } else {  // fuse two or three adjacent loops of one kind
        if (leaves.size() < 2) continue;
        size_t p = static_cast<size_t>(Uniform(0, static_cast<int64_t>(leaves.size()) - 2));
        std::vector<std::string> fl = {leaves[p], leaves[p + 1]};
        bool reduce = Loop(sch, stage, leaves[p]).reduce;
        if (Loop(sch, stage, leaves[p + 1]).reduce != reduce) continue;
        if (p + 2 < leaves.size() && Loop(sch, stage, leaves[p + 2]).reduce == reduce &&
            Coin(0.3)) {
          fl.push_back(leaves[p + 2]);
        }
        Count(sch.Fuse(stage, fl).status());
      }
    }
    std::vector<std::string> leaves = Leaves(sch, stage);
    if (Coin(0.4)) {  // parallel: one spatial loop among the outer ones
      std::vector<std::string> cand;
      for (size_t p = 0; p < leaves.size() && p < 3; ++p) {
        if (!Loop(sch, stage, leaves[p]).reduce) cand.push_back(leaves[p]);
      }
      if (!cand.empty()) Count(sch.Parallel(stage, Pick(cand)));
    }
    if (Coin(0.5)) {  // vectorize: one of the two innermost loops
      std::vector<std::string> cand;
      for (size_t p = leaves.size() >= 2 ? leaves.size() - 2 : 0; p < leaves.size(); ++p) {
        const ir::LoopInfo& li = Loop(sch, stage, leaves[p]);
        if (li.extent <= 64 && li.kind == ir::ForKind::kSerial) cand.push_back(leaves[p]);
      }
      if (!cand.empty()) Count(sch.Vectorize(stage, Pick(cand)));
    }
    if (Coin(0.35)) {  // unroll: any short serial loop
      std::vector<std::string> cand;
      for (const std::string& l : leaves) {
        const ir::LoopInfo& li = Loop(sch, stage, l);
        if (li.extent <= 16 && li.kind == ir::ForKind::kSerial) cand.push_back(l);
      }
      if (!cand.empty()) Count(sch.Unroll(stage, Pick(cand)));
    }
  }

  // Whether `x` is `t` or is computed (transitively) inside `t`.
  static bool Inside(const ir::Schedule& sch, const std::string& x, const std::string& t) {
    const ir::Stage* s = sch.FindStage(x);
    for (int guard = 0; s && guard < 100; ++guard) {
      if (s->name == t) return true;
      if (s->attach != ir::AttachKind::kAt) return false;
      s = sch.FindStage(s->attach_stage);
    }
    return false;
  }

  void Attach(ir::Schedule& sch, const std::string& stage) {
    const ir::Stage* s = sch.FindStage(stage);
    if (s->is_output) return;
    // Cache stages are meant to be attached; plain producers are, half the time.
    bool cache = s->scope != "global" || stage.find('.') != std::string::npos;
    if (!Coin(cache ? 0.8 : 0.5)) return;
    std::vector<std::string> consumers = sch.Consumers(stage);
    std::vector<std::string> targets;
    for (const std::string& t : consumers) {
      bool all = std::all_of(consumers.begin(), consumers.end(),
                             [&](const std::string& c) { return Inside(sch, c, t); });
      if (all) targets.push_back(t);
    }
    if (targets.empty()) return;
    const std::string t = Pick(targets);
    // The other consumers live inside `t` at some loop; the producer must be computed at that
    // loop or an outer one, or they would read it before it exists.
    const std::vector<std::string>& leaves = sch.FindStage(t)->leaves;
    size_t last = leaves.size() - 1;
    for (const std::string& c : consumers) {
      if (c == t) continue;
      const std::string l = LoopIn(sch, c, t);
      last = std::min<size_t>(last, std::find(leaves.begin(), leaves.end(), l) - leaves.begin());
    }
    std::vector<std::string> cand(leaves.begin(), leaves.begin() + static_cast<long>(last) + 1);
    Count(sch.ComputeAt(stage, t, Pick(cand)));
  }

  // The loop of `t` that `x` (computed inside `t`) lives in.
  static std::string LoopIn(const ir::Schedule& sch, const std::string& x, const std::string& t) {
    const ir::Stage* s = sch.FindStage(x);
    for (int guard = 0; s && s->attach == ir::AttachKind::kAt && guard < 100; ++guard) {
      if (s->attach_stage == t) return s->attach_loop;
      s = sch.FindStage(s->attach_stage);
    }
    return "";
  }

  std::mt19937_64 rng_;
  RandomScheduleStats* stats_;
};

// A random valid schedule of `w`, the same for the same seed.
inline ir::Schedule RandomSchedule(const ir::Workload& w, uint64_t seed,
                                   RandomScheduleStats* stats) {
  RandomScheduler gen(seed, stats);
  return gen.Generate(w);
}

}  // namespace lathe::testing

#endif  // LATHE_TESTS_CODEGEN_RANDOM_SCHEDULE_H_
