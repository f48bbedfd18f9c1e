// \file
// How well the cost model ranks real CPU schedules. Generates random but valid schedules of
// matmul 128x128x128 and a 3x3 conv2d (cache_write + compute_at, multi-level tiling with
// random factors, reorder, parallel outer loops, vectorized and unrolled inner loops),
// JIT-compiles and times each (median of a few runs, output checked once against the
// reference), trains the cost model on 80 % of them and reports, on the held-out 20 % of each
// workload: pairwise ranking accuracy, top-k recall, and how fast the predicted best is
// compared with the measured best; plus feature extraction, training and prediction times.
//
// Usage: cost_model_bench [programs_per_workload=200] [seed=1] [time_budget_s=180]
//                         [xgboost_threads=1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpu_kernel.h"
#include "codegen/lower.h"
#include "cost_model/features.h"
#include "cost_model/xgb_model.h"
#include "ir/check.h"
#include "ir/reference.h"
#include "ir/schedule.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "proto/trace_io.h"

namespace lathe::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

// Ansor-like CPU sketch with random decisions; a primitive the schedule refuses is skipped.
class SketchSampler {
 public:
  explicit SketchSampler(uint64_t seed) : rng_(seed) {}

  ir::Schedule Sample(const ir::Workload& w) {
    ir::Schedule sch(w, "cpu");
    std::string out;
    for (const ir::Stage& s : sch.stages()) {
      if (s.is_output) out = s.name;
    }
    for (const ir::Stage& s : std::vector<ir::Stage>(sch.stages())) {
      if (!s.is_output) (void)sch.ComputeInline(s.name);
    }
    std::string local;
    if (Coin(0.75)) {
      auto l = sch.CacheWrite(out, "local");
      if (l.ok()) local = *l;
    }
    const ir::Stage* st = sch.FindStage(out);
    std::vector<std::string> spatial, reduce;
    for (const std::string& loop : st->root_loops) {
      (st->FindLoop(loop)->reduce ? reduce : spatial).push_back(loop);
    }
    // Output stage: each spatial axis split into outer / middle / inner.
    std::vector<std::string> outer, middle, inner;
    for (const std::string& ax : spatial) {
      int64_t ext = st->FindLoop(ax)->extent;
      int64_t f2 = Factor(ext, ax == spatial.back() ? 16 : 8);
      int64_t f1 = Factor(std::max<int64_t>(ext / f2, 1), 8);
      auto names = sch.Split(out, ax, {f1, f2});
      if (!names.ok()) {
        outer.push_back(ax);
        continue;
      }
      outer.push_back((*names)[0]);
      middle.push_back((*names)[1]);
      inner.push_back((*names)[2]);
      st = sch.FindStage(out);
    }
    std::vector<std::string> order = outer;
    order.insert(order.end(), middle.begin(), middle.end());
    if (local.empty()) {
      // No accumulator: the reduction runs inside the tile, split once.
      for (const std::string& r : reduce) {
        int64_t ext = sch.FindStage(out)->FindLoop(r)->extent;
        auto names = sch.Split(out, r, {Factor(ext, 8)});
        if (names.ok()) {
          order.insert(order.end() - static_cast<long>(middle.size()), (*names)[0]);
          order.push_back((*names)[1]);
        } else {
          order.push_back(r);
        }
      }
    }
    order.insert(order.end(), inner.begin(), inner.end());
    (void)sch.Reorder(out, order);
    // Fuse the outer loops (those of extent > 1 first) and run them in parallel.
    std::string par = outer.empty() ? "" : outer[0];
    int fuse = std::min<int>(static_cast<int>(outer.size()), static_cast<int>(Uniform(1, 3)));
    if (fuse > 1) {
      auto f = sch.Fuse(out, std::vector<std::string>(outer.begin(), outer.begin() + fuse));
      if (f.ok()) par = *f;
    }
    if (!par.empty() && Coin(0.85)) (void)sch.Parallel(out, par);
    if (!inner.empty() && Coin(0.8)) (void)sch.Vectorize(out, inner.back());
    if (inner.size() > 1 && Coin(0.4)) (void)sch.Unroll(out, inner[inner.size() - 2]);

    if (!local.empty()) {
      // The accumulator: reduce loops split and moved outside its spatial loops, the last
      // spatial loop vectorized, attached at a tile loop of the output.
      const ir::Stage* ls = sch.FindStage(local);
      std::vector<std::string> lspatial, lreduce_outer, lreduce_inner;
      for (const std::string& loop : ls->root_loops) {
        if (!ls->FindLoop(loop)->reduce) {
          lspatial.push_back(loop);
          continue;
        }
        int64_t ext = ls->FindLoop(loop)->extent;
        auto names = sch.Split(local, loop, {Factor(ext, 8)});
        if (names.ok()) {
          lreduce_outer.push_back((*names)[0]);
          lreduce_inner.push_back((*names)[1]);
        } else {
          lreduce_outer.push_back(loop);
        }
        ls = sch.FindStage(local);
      }
      std::vector<std::string> lorder = lreduce_outer;
      if (Coin(0.5)) {
        lorder.insert(lorder.end(), lreduce_inner.begin(), lreduce_inner.end());
        lorder.insert(lorder.end(), lspatial.begin(), lspatial.end());
      } else {
        lorder.insert(lorder.end(), lspatial.begin(), lspatial.end());
        lorder.insert(lorder.end(), lreduce_inner.begin(), lreduce_inner.end());
      }
      (void)sch.Reorder(local, lorder);
      if (lorder.back() == lspatial.back() && Coin(0.8)) {
        (void)sch.Vectorize(local, lspatial.back());
      }
      if (!lreduce_inner.empty() && Coin(0.3)) (void)sch.Unroll(local, lreduce_inner.back());
      std::vector<std::string> targets;
      if (!par.empty()) targets.push_back(par);
      for (const std::string& m : middle) targets.push_back(m);
      if (!targets.empty())
        (void)sch.ComputeAt(local, out, targets[Uniform(0, targets.size() - 1)]);
    }
    return sch;
  }

 private:
  bool Coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  // A power-of-two factor up to `max`, mostly dividing `ext`.
  int64_t Factor(int64_t ext, int64_t max) {
    std::vector<int64_t> c;
    for (int64_t f = 1; f <= max && f <= ext; f *= 2) c.push_back(f);
    if (ext % 7 == 0 && ext >= 7) c.push_back(7);
    return c[Uniform(0, static_cast<int64_t>(c.size()) - 1)];
  }

  std::mt19937_64 rng_;
};

struct Sample {
  std::string workload;
  cost_model::FeatureMatrix features;
  double throughput = 0;  // GFLOP/s
};

struct Collected {
  std::vector<Sample> samples;
  int invalid = 0, wrong = 0, duplicate = 0;
  double jit_s = 0, time_s = 0, feature_s = 0;
};

void Collect(const std::string& spec, int count, uint64_t seed, double budget_s, Collected* c) {
  auto w = ir::MakeWorkload(spec);
  if (!w.ok()) {
    std::fprintf(stderr, "workload %s: %s\n", spec.c_str(), w.status().ToString().c_str());
    std::exit(1);
  }
  auto args = ir::AllocateArgs(*w);
  ir::FillRandomInputs(args, 7);
  auto ref = args;
  if (!ir::ComputeReference(*w, ref).ok()) std::exit(1);
  std::vector<void*> ptrs;
  for (auto& a : args) ptrs.push_back(a.data());
  const int n = static_cast<int>(ptrs.size());

  SketchSampler sampler(seed);
  std::set<std::string> seen;
  const Clock::time_point start = Clock::now();
  int got = 0;
  for (int attempt = 0; got < count && attempt < count * 4 && Seconds(start) < budget_s;
       ++attempt) {
    ir::Schedule sch = sampler.Sample(*w);
    if (!seen.insert(traceio::TraceToJson(sch.trace())).second) {
      ++c->duplicate;
      continue;
    }
    auto f = codegen::Lower(sch, "kernel");
    if (!f.ok()) {
      ++c->invalid;
      continue;
    }
    Clock::time_point t = Clock::now();
    auto feats = cost_model::ExtractFeatures(*f);
    c->feature_s += Seconds(t);
    t = Clock::now();
    auto k = codegen::JitCompile(*f);
    c->jit_s += Seconds(t);
    if (!feats.ok() || !k.ok()) {
      ++c->invalid;
      continue;
    }
    t = Clock::now();
    std::fill(args.back().begin(), args.back().end(), 0.f);
    (*k)->Run(ptrs.data(), n);
    if (!ir::CheckOutput(args.back(), ref.back(), (*w).output()->shape).ok()) {
      ++c->wrong;
      continue;
    }
    std::vector<double> times;
    for (int r = 0; r < 5; ++r) {
      Clock::time_point a = Clock::now();
      (*k)->Run(ptrs.data(), n);
      times.push_back(Seconds(a));
    }
    std::sort(times.begin(), times.end());
    c->time_s += Seconds(t);
    c->samples.push_back({w->key, std::move(*feats), w->flops / times[2] * 1e-9});
    ++got;
  }
  std::printf("%-50s %d programs (%.1f s)\n", spec.c_str(), got, Seconds(start));
}

// Trains on the training programs and prints ranking figures on the held-out ones, per
// workload. False when training or prediction fails.
bool Evaluate(const cost_model::CostModelOptions& options, const std::vector<std::string>& specs,
              const std::vector<cost_model::FeatureMatrix>& train_x,
              const std::vector<double>& train_y, const std::vector<std::string>& train_k,
              const std::vector<cost_model::FeatureMatrix>& test_x,
              const std::vector<double>& test_y, const std::vector<std::string>& test_k) {
  cost_model::CostModel model(options);
  Clock::time_point t = Clock::now();
  absl::Status st = model.Update(train_x, train_y, train_k);
  const double train_s = Seconds(t);
  if (!st.ok() || !model.trained()) {
    std::fprintf(stderr, "training failed: %s\n", st.ToString().c_str());
    return false;
  }
  t = Clock::now();
  auto scores = model.Predict(test_x);
  const double predict_s = Seconds(t);
  if (!scores.ok()) {
    std::fprintf(stderr, "prediction failed: %s\n", scores.status().ToString().c_str());
    return false;
  }
  std::printf("train: %zu programs in %.2f s; predict: %zu programs in %.2f ms (%.1f us/program)\n",
              train_x.size(), train_s, test_x.size(), predict_s * 1e3,
              test_x.empty() ? 0.0 : predict_s * 1e6 / test_x.size());
  for (const std::string& spec : specs) {
    const std::string key = ir::WorkloadKey(ir::MakeWorkload(spec)->canonical);
    std::vector<float> s, l;
    for (size_t i = 0; i < test_x.size(); ++i) {
      if (test_k[i] != key) continue;
      s.push_back((*scores)[i]);
      l.push_back(static_cast<float>(test_y[i]));
    }
    if (s.empty()) continue;
    std::vector<size_t> by_true(s.size()), by_pred(s.size());
    std::iota(by_true.begin(), by_true.end(), 0);
    std::iota(by_pred.begin(), by_pred.end(), 0);
    std::sort(by_true.begin(), by_true.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
    std::sort(by_pred.begin(), by_pred.end(), [&](size_t a, size_t b) { return s[a] > s[b]; });
    std::printf("%s: %zu held out, pairwise accuracy %.3f, best %.2f GFLOP/s, median %.2f\n",
                spec.c_str(), s.size(), cost_model::PairwiseAccuracy(s, l), l[by_true[0]],
                l[by_true[by_true.size() / 2]]);
    for (size_t k : {1, 5, 10}) {
      if (k > s.size()) continue;
      std::set<size_t> truth(by_true.begin(), by_true.begin() + k);
      int hit = 0;
      float best_pred = 0;
      for (size_t j = 0; j < k; ++j) {
        hit += truth.count(by_pred[j]);
        best_pred = std::max(best_pred, l[by_pred[j]]);
      }
      std::printf(
          "  top-%zu recall %.2f; best of the predicted top-%zu runs at %.0f %% of the "
          "best\n",
          k, static_cast<double>(hit) / k, k, 100.0 * best_pred / l[by_true[0]]);
    }
  }
  return true;
}

}  // namespace
}  // namespace lathe::bench

int main(int argc, char** argv) {
  using namespace lathe;
  using namespace lathe::bench;
  const int per_workload = argc > 1 ? std::atoi(argv[1]) : 200;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  const double budget_s = argc > 3 ? std::atof(argv[3]) : 180;
  const std::vector<std::string> specs = {
      "matmul:m=128,n=128,k=128",
      "conv2d:n=1,c=32,h=28,w=28,k=32,r=3,s=3,pad=1",
  };
  Collected c;
  for (size_t i = 0; i < specs.size(); ++i) {
    Collect(specs[i], per_workload, seed + i, budget_s / specs.size(), &c);
  }
  const size_t total = c.samples.size();
  std::printf(
      "collected %zu programs (invalid %d, wrong %d, duplicate %d); lowering+JIT %.1f s, "
      "timing %.1f s, features %.2f ms/program\n",
      total, c.invalid, c.wrong, c.duplicate, c.jit_s, c.time_s,
      total ? c.feature_s * 1e3 / total : 0.0);

  // 80 / 20 split, per workload.
  std::mt19937_64 rng(seed * 7919);
  std::vector<size_t> idx(total);
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), rng);
  std::vector<cost_model::FeatureMatrix> train_x, test_x;
  std::vector<double> train_y, test_y;
  std::vector<std::string> train_k, test_k;
  for (size_t j = 0; j < total; ++j) {
    const Sample& s = c.samples[idx[j]];
    bool test = j % 5 == 0;
    (test ? test_x : train_x).push_back(s.features);
    (test ? test_y : train_y).push_back(s.throughput);
    (test ? test_k : train_k).push_back(s.workload);
  }
  struct Config {
    const char* name;
    cost_model::CostModelOptions options;
  };
  std::vector<Config> configs;
  cost_model::CostModelOptions base;
  base.nthread = argc > 4 ? std::atoi(argv[4]) : 1;
  configs.push_back({"default (eta 0.2, depth 10, 200 rounds)", base});
  cost_model::CostModelOptions stop = base;
  stop.early_stopping_min_programs = 0;
  configs.push_back({"early stopping (50 rounds patience, 15 % held out)", stop});
  cost_model::CostModelOptions shallow = base;
  shallow.max_depth = 6;
  shallow.eta = 0.1;
  configs.push_back({"200 rounds, eta 0.1, depth 6", shallow});
  for (const Config& config : configs) {
    std::printf("\n== %s\n", config.name);
    if (!Evaluate(config.options, specs, train_x, train_y, train_k, test_x, test_y, test_k)) {
      return 1;
    }
  }
  return 0;
}
