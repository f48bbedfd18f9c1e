// \file
// The cost model's ranking quality on held-out records, shared by bench_tune and
// cost_model_eval: records of tuning databases are featurized, split 80/20 per workload, a
// model is trained on the 80 % and judged on the 20 % of each workload (pairwise accuracy,
// top-k recall, how fast the predicted best is against the measured best).
#ifndef LATHE_BENCH_MODEL_QUALITY_H_
#define LATHE_BENCH_MODEL_QUALITY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cost_model/features.h"
#include "cost_model/xgb_model.h"

namespace lathe::bench {

// One record of a tuning database, featurized: GFLOP/s is 0 for a failed candidate.
struct Program {
  std::string workload_key;
  cost_model::FeatureMatrix features;
  double gflops = 0;
  std::string trace_json;
};

// Every record of the database at `db_path` whose trace lowers (empty when it cannot open),
// featurized as the tuner does (Lower()'s recipe of the record's device class), or with
// `structural_only` as the structural program (vectorized loops still loops, no versioning:
// the program the features read before Lower() was the whole recipe), to compare the two.
std::vector<Program> LoadPrograms(const std::string& db_path, bool structural_only = false);

struct WorkloadQuality {
  std::string name;
  size_t held_out = 0;
  double pairwise = 0;
  double recall[3] = {0, 0, 0};  // top-1, top-5, top-10; -1 when fewer programs held out
  double best_of_top10 = 0;      // measured best of the predicted top 10 / measured best
};

struct ModelQuality {
  bool ok = false;
  std::string error;
  size_t trained_on = 0;
  double train_s = 0;
  std::vector<WorkloadQuality> workloads;
  double mean_pairwise = 0;  // over workloads
};

// Trains one model on 80 % of each workload's programs (split drawn with `seed`) and judges
// it on the rest. `names` maps workload keys to display names.
ModelQuality EvaluateHeldOut(const std::map<std::string, std::vector<Program>>& by_workload,
                             const std::map<std::string, std::string>& names,
                             const cost_model::CostModelOptions& options, uint64_t seed);

}  // namespace lathe::bench

#endif  // LATHE_BENCH_MODEL_QUALITY_H_
