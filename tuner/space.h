// \file
// The CPU search space of a workload: sketches derived from the operator definition (tiling
// of the output with a local accumulator for reductions, inlined elementwise stages and
// paddings, packing of reduction inputs into compact panels, parallel outer loops,
// vectorized and unrolled inner loops), each with a vector of integer decisions. A
// candidate is (sketch, decisions); applying it replays the primitives into a Schedule whose
// trace records them. Sampling draws decisions at random; mutation perturbs them (tile
// sizes, unroll, parallel granularity, compute location, packing).
//
// Thread-safety: a SearchSpace is immutable after Create; its methods may run concurrently.
#ifndef LATHE_TUNER_SPACE_H_
#define LATHE_TUNER_SPACE_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cost_model/features.h"
#include "ir/schedule.h"
#include "ir/target.h"
#include "ir/trace.h"
#include "ir/workload.h"

namespace lathe::tuner {

// What the space needs to know of the device.
struct CpuTarget {
  int vector_lanes = 8;  // float32 lanes of the widest vector register
  int cores = 2;
  int vector_registers = 16;
};
CpuTarget HostCpuTarget();

struct Candidate {
  int sketch = 0;
  std::vector<int64_t> decisions;
  ir::Trace trace;  // filled by Sample / Mutate / FromTrace
  // The applied schedule, kept by Sample / Mutate / FromTrace so that the search lowers it
  // without replaying the trace again; may be null (then Apply it).
  std::shared_ptr<const ir::Schedule> schedule;
  // The features of its lowered program, set by the search when it ranked the candidate with
  // the cost model (null otherwise): the driver teaches them to the model and stores them with
  // the record instead of lowering the program again.
  std::shared_ptr<const cost_model::FeatureMatrix> features;
};

// Candidates a caller already holds, by decisions: a mutation that lands on one of them
// copies it instead of replaying its schedule (an evolved population keeps revisiting the same
// neighbours; replaying is a third of a search round).
class KnownCandidates {
 public:
  virtual ~KnownCandidates() = default;
  // The valid candidate of this space with these decisions, or null. Its schedule may be null.
  virtual const Candidate* Find(const std::vector<int64_t>& decisions) const = 0;
};

class SearchSpace {
 public:
  // Analyses the workload's stages and builds its sketches. Fails only for workloads whose
  // structure no sketch rule covers.
  static absl::StatusOr<std::unique_ptr<SearchSpace>> Create(const ir::Workload& workload,
                                                             const CpuTarget& target);
  virtual ~SearchSpace() = default;

  virtual const ir::Workload& workload() const = 0;
  virtual int num_sketches() const = 0;
  // The kind of target its programs run on: it picks Lower()'s recipe, so the search
  // featurizes the program the backend compiles.
  virtual ir::TargetKind target_kind() const { return ir::TargetKind::kCpu; }

  // The schedule of `c` (and c's trace, when `c` is non-const via the other overloads).
  virtual absl::StatusOr<ir::Schedule> Apply(const Candidate& c) const = 0;
  // A random valid candidate, trace filled in.
  virtual absl::StatusOr<Candidate> Sample(std::mt19937_64& rng) const = 0;
  // A valid neighbour of `c` (one or more decisions changed), trace filled in.
  absl::StatusOr<Candidate> Mutate(const Candidate& c, std::mt19937_64& rng) const {
    return Mutate(c, rng, nullptr);
  }
  // The same neighbour (the same draws from `rng`), copied from `known` when it holds it: then
  // its schedule is whatever the known one has, possibly null.
  virtual absl::StatusOr<Candidate> Mutate(const Candidate& c, std::mt19937_64& rng,
                                           const KnownCandidates* known) const = 0;
  // The candidate that produced `trace`, to seed the search from stored records; fails for
  // traces that no sketch of this space produces.
  virtual absl::StatusOr<Candidate> FromTrace(const ir::Trace& trace) const = 0;
  // The candidate of this space with these decisions, e.g. those of a good schedule of
  // another workload of the same operator (its tile sizes may not exist here: then it
  // fails). Unimplemented where a space does not support it.
  // Up to `max` valid candidates that rules about the target pick without measuring (a
  // register tile that fills the vector registers, the input that the tile walks along
  // packed, the outer loops parallel), best guess first: measured in the first round, they
  // give the model good programs to learn from before the search has any. May be empty.
  virtual std::vector<Candidate> Heuristic(int max) const {
    (void)max;
    return {};
  }
  virtual absl::StatusOr<Candidate> FromDecisions(int sketch,
                                                  const std::vector<int64_t>& decisions) const {
    (void)sketch;
    (void)decisions;
    return absl::UnimplementedError("this search space does not map foreign decisions");
  }
};

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_SPACE_H_
