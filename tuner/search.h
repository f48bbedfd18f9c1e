// \file
// Evolutionary search over a SearchSpace, ranked by the learned cost model (Ansor's
// defaults: population 2048, 4 generations, mutation probability 0.85, ε-greedy 0.05).
// Each round starts from the best measured candidates and random samples, evolves them by
// mutation, parents drawn by their rank under the model's scores, and returns the
// best-scored candidates never measured before plus an ε share of random ones; the first
// quarter of a batch comes from the best-scored neighbours of the best measured candidates
// (a local search the trees, which do not extrapolate, need to climb from the incumbent).
#ifndef LATHE_TUNER_SEARCH_H_
#define LATHE_TUNER_SEARCH_H_

#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "cost_model/xgb_model.h"
#include "ir/trace.h"
#include "tuner/space.h"

namespace lathe::tuner {

struct SearchOptions {
  int population = 2048;
  int generations = 4;
  double mutation_prob = 0.85;
  double eps_greedy = 0.05;
  int threads = 0;  // threads for feature extraction and scoring; 0: every core
  // Up to this share of each batch: the model's best-ranked unmeasured neighbours (one
  // mutation away) of the `local_seeds` best seeds, `local_mutations` drawn per seed.
  double local_share = 0.25;
  int local_seeds = 4;
  int local_mutations = 48;
};

struct SearchStats {
  double seconds = 0;  // wall time of the round
  int scored = 0;      // candidates scored by the model
  int invalid = 0;     // samples or mutations that failed to apply or lower
  int local = 0;       // batch members taken from the neighbours of the best seeds
};

// Programs a search must not propose (measured, or dispatched for measurement).
using ProgramSet = absl::flat_hash_set<ir::ProgramId>;

// Returns up to `batch` distinct candidates whose program is not in `measured`. `seeds`
// are good measured candidates to start from (may be empty); `model` may be untrained, in
// which case the round is random sampling.
absl::StatusOr<std::vector<Candidate>> NextBatch(const SearchSpace& space,
                                                 const cost_model::CostModel& model,
                                                 const std::vector<Candidate>& seeds,
                                                 const ProgramSet& measured, int batch,
                                                 const SearchOptions& options, std::mt19937_64& rng,
                                                 SearchStats* stats = nullptr);

// The program of a candidate (its identity for deduplication and in candidate ids).
inline ir::ProgramId ProgramOf(const Candidate& c) { return ir::ProgramIdOf(c.trace); }

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_SEARCH_H_
