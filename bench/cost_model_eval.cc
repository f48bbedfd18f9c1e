// \file
// Compares cost-model objectives and settings on the records of existing tuning databases
// (e.g. those `bench_tune --keep-db` or `lathe tune --db` left): for each configuration, the
// held-out evaluation of bench/model_quality.h over several random 80/20 splits, reported as
// the mean and spread of the pairwise accuracy per workload, top-k recall and training time.
//
// Usage: cost_model_eval [--splits N] [--seed N] [--structural] DB [DB...]
//   --structural  featurize the structural programs (Lower() without versioning and
//                 vectorization), as the features did before Lower() was the whole recipe
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench/model_quality.h"
#include "cost_model/xgb_model.h"

namespace lathe::bench {
namespace {

struct Config {
  std::string label;
  cost_model::CostModelOptions options;
};

std::vector<Config> Configs() {
  std::vector<Config> out;
  for (cost_model::Objective o :
       {cost_model::Objective::kRowRegression, cost_model::Objective::kPackSumRegression,
        cost_model::Objective::kPairwiseRank}) {
    Config c;
    c.options.objective = o;
    c.label = cost_model::ObjectiveName(o);
    out.push_back(c);
  }
  auto rank = [&](std::string label, auto tweak) {
    Config c;
    c.options.objective = cost_model::Objective::kPairwiseRank;
    tweak(c.options);
    c.label = "pairwise-rank " + std::move(label);
    out.push_back(c);
  };
  for (int depth : {6, 8}) {
    rank("depth " + std::to_string(depth),
         [&](cost_model::CostModelOptions& o) { o.max_depth = depth; });
  }
  for (double sub : {0.8, 0.6}) {
    for (double mcw : {1.0, 4.0}) {
      rank("depth 6 subsample " + std::to_string(sub).substr(0, 3) + " min_child_weight " +
               std::to_string(static_cast<int>(mcw)),
           [&](cost_model::CostModelOptions& o) {
             o.max_depth = 6;
             o.subsample = sub;
             o.min_child_weight = mcw;
           });
    }
  }
  return out;
}

int Main(int argc, char** argv) {
  int splits = 3;
  uint64_t seed = 1;
  std::vector<std::string> dbs;
  bool structural = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--splits" && i + 1 < argc) {
      splits = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--structural") {
      structural = true;
    } else if (a == "-h" || a == "--help" || a.rfind("--", 0) == 0) {
      std::fprintf(stderr,
                   "usage: cost_model_eval [--splits N] [--seed N] [--structural] DB [DB...]\n");
      return a == "-h" || a == "--help" ? 0 : 2;
    } else {
      dbs.push_back(a);
    }
  }
  if (dbs.empty()) {
    std::fprintf(stderr,
                 "usage: cost_model_eval [--splits N] [--seed N] [--structural] DB [DB...]\n");
    return 2;
  }
  std::map<std::string, std::vector<Program>> by_workload;
  std::map<std::string, std::string> names;
  for (const std::string& db : dbs) {
    std::vector<Program> programs = LoadPrograms(db, structural);
    if (programs.empty()) std::fprintf(stderr, "%s: no records read\n", db.c_str());
    for (Program& p : programs) {
      std::string name = db.substr(db.find_last_of('/') + 1);
      if (names.count(p.workload_key) == 0) names[p.workload_key] = name;
      by_workload[p.workload_key].push_back(std::move(p));
    }
  }
  std::printf("# cost_model_eval: %zu workloads, %d splits of 80/20\n\n", by_workload.size(),
              splits);
  for (const auto& [key, programs] : by_workload) {
    std::printf("- %s: %zu programs (%s)\n", names[key].c_str(), programs.size(), key.c_str());
  }
  std::printf(
      "\n| configuration | mean pairwise acc. (min-max over splits) | per workload | top-5 "
      "recall | best of predicted top-10 | train s |\n|---|---|---|---|---|---|\n");
  for (const Config& c : Configs()) {
    std::vector<double> means;
    std::map<std::string, double> per_workload;
    double recall5 = 0, best10 = 0, train_s = 0;
    int nw = 0;
    std::string error;
    for (int s = 0; s < splits; ++s) {
      const ModelQuality q = EvaluateHeldOut(by_workload, names, c.options, seed + s);
      if (!q.ok) {
        error = q.error;
        break;
      }
      means.push_back(q.mean_pairwise);
      train_s += q.train_s / splits;
      for (const WorkloadQuality& w : q.workloads) {
        per_workload[w.name] += w.pairwise / splits;
        recall5 += std::max(w.recall[1], 0.0);
        best10 += w.best_of_top10;
        ++nw;
      }
    }
    if (!error.empty()) {
      std::printf("| %s | %s | | | | |\n", c.label.c_str(), error.c_str());
      continue;
    }
    double mean = 0;
    for (double m : means) mean += m / static_cast<double>(means.size());
    std::string detail;
    for (const auto& [name, acc] : per_workload) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s%s %.3f", detail.empty() ? "" : ", ", name.c_str(), acc);
      detail += buf;
    }
    std::printf("| %s | %.3f (%.3f-%.3f) | %s | %.2f | %.0f %% | %.2f |\n", c.label.c_str(), mean,
                *std::min_element(means.begin(), means.end()),
                *std::max_element(means.begin(), means.end()), detail.c_str(),
                nw ? recall5 / nw : 0.0, nw ? 100.0 * best10 / nw : 0.0, train_s);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace lathe::bench

int main(int argc, char** argv) { return lathe::bench::Main(argc, argv); }
