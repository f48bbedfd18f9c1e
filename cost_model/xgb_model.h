// \file
// The learned cost model (DESIGN.md "Cost model"): gradient-boosted trees (XGBoost, `hist`)
// over per-store features (features.h). A program's score is the sum of the predictions of
// its store rows. By default the trees learn to order programs of the same workload (a
// pairwise logistic loss on those sums; see Objective), so scores rank candidates of one
// workload and mean nothing across workloads; they are not latencies. Labels are each
// program's throughput normalised by the best throughput measured for its workload.
//
// The model keeps the data it was given and retrains from scratch when the data grew by
// `retrain_growth` (20 %) since the last training. Keep one model per device class.
// No XGBoost type appears here.
//
// Thread-safety: Predict() may run concurrently with other Predict() calls; Update(), Train()
// and moves need exclusive access.
#ifndef LATHE_COST_MODEL_XGB_MODEL_H_
#define LATHE_COST_MODEL_XGB_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cost_model/features.h"

namespace lathe::cost_model {

// What the trees are trained to predict (see CostModelOptions::objective).
enum class Objective {
  // Every store row regresses to its program's label; a program scores the mean of its rows.
  kRowRegression,
  // A program scores the sum of its rows' predictions, and the sum regresses to the label
  // (Ansor's "pack-sum"): rows of cheap stages (packing, epilogues) learn small shares.
  kPackSumRegression,
  // A program scores the sum of its rows; trained with a pairwise logistic loss between
  // programs of the same workload, each pair weighted by the difference of their labels, so
  // near-ties (measurement noise) count little. Scores are logits: only their order within
  // a workload means something.
  kPairwiseRank,
};
const char* ObjectiveName(Objective o);

struct CostModelOptions {
  Objective objective = Objective::kPairwiseRank;
  // Defaults chosen with bench/cost_model_eval on 2,400 records of gemm512, bert_ffn and
  // conv128 tuning runs (4 random 80/20 splits): pairwise-rank at depth 6 with row
  // subsampling ranked held-out programs at 0.850-0.852 against 0.820 for the row
  // regression at depth 10, and trains as fast.
  double eta = 0.2;
  int max_depth = 6;
  int max_rounds = 200;
  // Stop when the validation metric has not improved for this many rounds (0: never): RMSE
  // for the row regression, pairwise accuracy within workloads for the objectives on program
  // sums. Metrics of a small held-out set are noisy, so the patience
  // is long and it needs enough programs (cost_model_bench, 320 programs: stopping on 10-15 %
  // held out ranked worse than 200 full rounds).
  int early_stopping_rounds = 50;
  // Fraction of programs held out for early stopping (when there are at least
  // `early_stopping_min_programs`).
  double validation_fraction = 0.15;
  int early_stopping_min_programs = 500;
  double min_child_weight = 1;
  double subsample = 0.8;
  // Retrain when the number of programs grew by at least this fraction since the last
  // training.
  double retrain_growth = 0.2;
  // No training below this many programs with at least one store row.
  int min_programs = 8;
  // XGBoost's OpenMP threads (0: one per core). One is the default: training a few thousand
  // rows takes well under a second, and OpenMP threads spin-wait, which on a loaded machine
  // made training 10-30x slower in cost_model_bench.
  int nthread = 1;
  uint64_t seed = 1;
};

class CostModel {
 public:
  explicit CostModel(CostModelOptions options = {});
  ~CostModel();
  CostModel(CostModel&&) noexcept;
  CostModel& operator=(CostModel&&) noexcept;

  // Adds measured programs: features, throughput (any unit proportional to 1 / latency,
  // e.g. GFLOP/s; 0 for a failed candidate) and the workload key each belongs to. Retrains
  // when the data grew enough (see CostModelOptions). InvalidArgument when the three lists
  // differ in length, a matrix has the wrong width, or a throughput is negative or not finite;
  // an XGBoost failure is returned as Internal and leaves the previous model in place.
  absl::Status Update(const std::vector<FeatureMatrix>& programs,
                      const std::vector<double>& throughputs,
                      const std::vector<std::string>& workload_keys);
  // Trains now on all data held, whatever its growth. FailedPrecondition with fewer than
  // `min_programs` programs.
  absl::Status Train();

  // One score per program, higher is better. A program without rows scores 0.
  // FailedPrecondition when the model is not trained; InvalidArgument for a matrix of the
  // wrong width.
  absl::StatusOr<std::vector<float>> Predict(const std::vector<FeatureMatrix>& programs) const;
  // The same, for matrices held elsewhere (none may be null).
  absl::StatusOr<std::vector<float>> Predict(
      const std::vector<const FeatureMatrix*>& programs) const;

  // The trained model as bytes (XGBoost UBJSON after a one-line lathe header recording the
  // feature layout version, the body's size and an FNV-1a checksum). FailedPrecondition when
  // not trained.
  absl::StatusOr<std::string> Save() const;
  // A model from Save()'s bytes. InvalidArgument for bytes that are not such a model (wrong
  // header, other feature version, truncated or damaged body, XGBoost data it rejects);
  // damaged bytes are caught by the checksum before XGBoost parses them.
  static absl::StatusOr<CostModel> Load(const std::string& bytes, CostModelOptions options = {});

  bool trained() const;
  // Programs held for training, and how many the current model was trained on (for a loaded
  // model: the count recorded when it was saved).
  int64_t num_programs() const;
  int64_t trained_on() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Per-program labels: throughput / (best throughput of the same workload key); 0 where the
// best is 0. Exposed for tests.
std::vector<float> NormalizeByWorkload(const std::vector<double>& throughputs,
                                       const std::vector<std::string>& workload_keys);

// Fraction of pairs (i, j) with labels[i] != labels[j] that `scores` orders as the labels
// do; 1 when there are no such pairs. Exposed for tests and benchmarks.
double PairwiseAccuracy(const std::vector<float>& scores, const std::vector<float>& labels);

}  // namespace lathe::cost_model

#endif  // LATHE_COST_MODEL_XGB_MODEL_H_
