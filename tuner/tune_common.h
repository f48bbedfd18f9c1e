// \file
// Pieces of a tuning loop shared by the embedded loop's callers and the daemon's job service:
// the starting cost model of a device class, search seeds from the best stored records, the
// search key of a stored trace, features of a candidate, the CPU target a device class
// describes, and the conversion of a measured error class to the database's.
#ifndef LATHE_TUNER_TUNE_COMMON_H_
#define LATHE_TUNER_TUNE_COMMON_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "cost_model/features.h"
#include "cost_model/xgb_model.h"
#include "db/database.h"
#include "db/record.h"
#include "ir/workload.h"
#include "lathe/v1/measure.pb.h"
#include "tuner/search.h"
#include "tuner/space.h"

namespace lathe::tuner {

// The version string recorded with every measurement.
inline constexpr char kLatheVersion[] = "0.1.0";

// The id under which a measurement is stored: "<workload key>:<program id>:<hash of the
// device class>". Re-measuring the same program on the same device class is therefore
// idempotent, and other device classes keep their own records.
std::string CandidateId(const std::string& workload_key, const ir::ProgramId& program,
                        const std::string& device_class);

// Unix time in milliseconds.
int64_t NowUnixMs();

// The database's error class of a measured one (unknown values: runtime error).
db::ErrorClass ErrorClassFromProto(lathe::v1::ErrorClass e);
// The proto form of a database error class.
lathe::v1::ErrorClass ErrorClassToProto(db::ErrorClass e);

// The cost-model features of a candidate's lowered program.
absl::StatusOr<cost_model::FeatureMatrix> CandidateFeatures(const SearchSpace& space,
                                                            const Candidate& c);

// The starting model: the device class's saved model (plus the ok records of `workloads` as
// its training data), else one trained on every ok record of the device class, else an
// untrained model (the first rounds sample at random).
cost_model::CostModel InitialModel(db::Database& database,
                                   const std::vector<ir::Workload>& workloads,
                                   const std::string& device_class);

// Creates the directory a database file at `path` goes into (and its parents), so that a
// first run with a fresh path works. PermissionDenied naming the directory when it cannot.
// Nothing for a PostgreSQL URL; InvalidArgument naming the scheme for any other URL (a URL is
// never taken for a path, db/location.h).
absl::Status CreateParentDirectory(const std::string& path);

// The programs among the stored traces of a workload on a device class: what a search must
// not propose again.
absl::StatusOr<ProgramSet> MeasuredPrograms(db::Database& database, const std::string& workload_key,
                                            const std::string& device_class);

// Candidates to start the search from: up to `k` of the best stored records that this space
// reproduces; while the workload has fewer than `k`, the decisions of the best records of
// other workloads of the same operator fill up (transfer from earlier tunings).
//
// With `cache` (one per space), a stored record already turned into a candidate is not parsed
// and replayed again: the best records change little from round to round, and their JSON
// parse and replay were a tenth of lathed's CPU per candidate (bench_service part 5).
struct SeedCache {
  // By candidate id: the candidate of the workload's own record, or of a related workload's
  // decisions; nullopt where the space does not reproduce it.
  std::unordered_map<std::string, std::optional<Candidate>> own, related;
  // Entries kept at most; beyond, the cache starts over.
  static constexpr size_t kMaxEntries = 1024;
};
std::vector<Candidate> SeedsFromDatabase(db::Database& database, const SearchSpace& space,
                                         const ir::Workload& w, const std::string& device_class,
                                         int k, SeedCache* cache = nullptr);

// The next batch of a tuning loop (NextBatch). With `rule_picked_first` (a task's first round
// of a run), or before the model has learned anything, the space's rule-picked candidates
// (SearchSpace::Heuristic) not measured yet lead it, at most a quarter of `batch` (at least
// one).
absl::StatusOr<std::vector<Candidate>> NextRound(const SearchSpace& space,
                                                 const cost_model::CostModel& model,
                                                 const std::vector<Candidate>& seeds,
                                                 const ProgramSet& measured, int batch,
                                                 const SearchOptions& options, std::mt19937_64& rng,
                                                 bool rule_picked_first = false);

// The database record of a measurement: `result` of the program `trace_json` of `workload`
// (canonical spec, key, flops) on `device_class`, measured by `worker`. An ok result without a
// positive median becomes a runtime error; a failed one keeps no negative median. The one
// conversion the embedded runner and lathed's Report share.
db::Record MakeRecord(const std::string& workload, const std::string& workload_key, double flops,
                      const std::string& device_class, const std::string& trace_json,
                      const lathe::v1::MeasureResult& result, const std::string& worker);

// The search-space target of a CPU device class "cpu:<model>:<isa>:<N>c" (vector lanes from
// the ISA, cores from N). InvalidArgument for anything else.
absl::StatusOr<CpuTarget> CpuTargetForDeviceClass(const std::string& device_class);

// The search space of `workload` for the devices of `device_class`: the CPU space for a CPU
// class, the GPU space for the architecture a GPU class "cuda:<name> (sm_XX)" names.
// InvalidArgument for a class that is neither (or a GPU class in a build without CUDA).
absl::StatusOr<std::unique_ptr<SearchSpace>> SpaceForDeviceClass(const ir::Workload& workload,
                                                                 const std::string& device_class);

// True for a GPU device class ("cuda:..."), whose candidates are timed with cold caches.
bool IsGpuDeviceClass(const std::string& device_class);

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_TUNE_COMMON_H_
