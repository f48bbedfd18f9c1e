#include "tuner/tune_common.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "codegen/lower.h"
#include "cost_model/database_io.h"
#include "db/location.h"
#include "db/lookup.h"
#include "ir/target.h"
#include "ir/trace.h"
#include "proto/trace_io.h"
#include "tuner/search.h"
#include "tuner/space_factory.h"

namespace lathe::tuner {

std::string CandidateId(const std::string& workload_key, const ir::ProgramId& program,
                        const std::string& device_class) {
  return absl::StrCat(workload_key, ":", program.Hex(), ":", ir::Fnv1a64Hex(device_class));
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

db::ErrorClass ErrorClassFromProto(lathe::v1::ErrorClass e) {
  switch (e) {
    case lathe::v1::OK:
      return db::ErrorClass::kOk;
    case lathe::v1::INVALID_SCHEDULE:
      return db::ErrorClass::kInvalidSchedule;
    case lathe::v1::COMPILE_ERROR:
      return db::ErrorClass::kCompileError;
    case lathe::v1::TIMEOUT:
      return db::ErrorClass::kTimeout;
    case lathe::v1::WRONG_ANSWER:
      return db::ErrorClass::kWrongAnswer;
    default:
      return db::ErrorClass::kRuntimeError;
  }
}

lathe::v1::ErrorClass ErrorClassToProto(db::ErrorClass e) {
  switch (e) {
    case db::ErrorClass::kOk:
      return lathe::v1::OK;
    case db::ErrorClass::kInvalidSchedule:
      return lathe::v1::INVALID_SCHEDULE;
    case db::ErrorClass::kCompileError:
      return lathe::v1::COMPILE_ERROR;
    case db::ErrorClass::kTimeout:
      return lathe::v1::TIMEOUT;
    case db::ErrorClass::kWrongAnswer:
      return lathe::v1::WRONG_ANSWER;
    case db::ErrorClass::kRuntimeError:
      break;
  }
  return lathe::v1::RUNTIME_ERROR;
}

absl::StatusOr<cost_model::FeatureMatrix> CandidateFeatures(const SearchSpace& space,
                                                            const Candidate& c) {
  absl::StatusOr<ir::Schedule> sch = space.Apply(c);
  if (!sch.ok()) return sch.status();
  absl::StatusOr<ir::LoweredFunc> f =
      codegen::Lower(*sch, "kernel", codegen::LowerOptions::ForTarget(space.target_kind()));
  if (!f.ok()) return f.status();
  return cost_model::ExtractFeatures(*f);
}

cost_model::CostModel InitialModel(db::Database& database,
                                   const std::vector<ir::Workload>& workloads,
                                   const std::string& device_class) {
  absl::StatusOr<cost_model::CostModel> loaded =
      cost_model::LoadFromDatabase(database, device_class);
  if (loaded.ok()) {
    cost_model::CostModel model = std::move(*loaded);
    std::vector<cost_model::FeatureMatrix> programs;
    std::vector<double> throughputs;
    std::vector<std::string> keys;
    for (const ir::Workload& w : workloads) {
      absl::StatusOr<std::vector<db::Record>> history = database.TopK(w.key, device_class, 1 << 20);
      if (!history.ok()) continue;
      std::vector<std::optional<cost_model::FeatureMatrix>> found =
          cost_model::FeaturesOfRecords(database, *history);
      for (size_t i = 0; i < history->size(); ++i) {
        if (!found[i].has_value() || (*history)[i].median_us <= 0) continue;
        programs.push_back(std::move(*found[i]));
        throughputs.push_back(1.0 / (*history)[i].median_us);
        keys.push_back(w.key);
      }
    }
    // A failed retraining keeps the loaded model, which is what we want here.
    if (!programs.empty()) (void)model.Update(programs, throughputs, keys);
    return model;
  }
  cost_model::CostModel model;
  // FailedPrecondition (too few records) leaves the data in the model, untrained.
  (void)cost_model::TrainFromDatabase(database, device_class, model);
  return model;
}

absl::Status CreateParentDirectory(const std::string& path) {
  absl::StatusOr<db::DatabaseLocation> location = db::ParseDatabaseLocation(path);
  if (!location.ok()) return location.status();
  if (location->kind != db::StoreKind::kSqlite) return absl::OkStatus();
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return absl::OkStatus();
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create directory ", parent.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ProgramSet> MeasuredPrograms(db::Database& database, const std::string& workload_key,
                                            const std::string& device_class) {
  absl::StatusOr<std::vector<std::string>> traces =
      database.MeasuredTraces(workload_key, device_class);
  if (!traces.ok()) return traces.status();
  ProgramSet programs;
  programs.reserve(traces->size());
  for (const std::string& t : *traces) programs.insert(traceio::ProgramIdOfTraceJson(t));
  return programs;
}

namespace {

// The candidate of record `r` made by `make` (from its parsed trace), through `cache` when
// given (see SeedCache); nullopt when the trace does not parse or `make` fails.
template <typename Make>
std::optional<Candidate> CachedSeed(
    std::unordered_map<std::string, std::optional<Candidate>>* cache, const db::Record& r,
    Make&& make) {
  if (cache != nullptr) {
    if (auto hit = cache->find(r.candidate_id); hit != cache->end()) return hit->second;
  }
  std::optional<Candidate> c;
  if (absl::StatusOr<ir::Trace> t = traceio::TraceFromJson(r.trace_json); t.ok()) {
    absl::StatusOr<Candidate> made = make(*t);
    if (made.ok()) c = std::move(*made);
  }
  if (cache != nullptr) {
    if (cache->size() >= SeedCache::kMaxEntries) cache->clear();
    cache->emplace(r.candidate_id, c);
  }
  return c;
}

}  // namespace

std::vector<Candidate> SeedsFromDatabase(db::Database& database, const SearchSpace& space,
                                         const ir::Workload& w, const std::string& device_class,
                                         int k, SeedCache* cache) {
  std::vector<Candidate> seeds;
  absl::StatusOr<std::vector<db::Record>> top = database.TopK(w.key, device_class, k);
  if (!top.ok()) return seeds;
  for (const db::Record& r : *top) {
    std::optional<Candidate> c = CachedSeed(cache != nullptr ? &cache->own : nullptr, r,
                                            [&](const ir::Trace& t) { return space.FromTrace(t); });
    if (c.has_value()) seeds.push_back(std::move(*c));
  }
  if (static_cast<int>(seeds.size()) >= k) return seeds;
  // A workload with few records of its own starts from the decisions of the best schedules
  // of other workloads of the operator (the two best of each), where this space has them.
  absl::StatusOr<std::vector<db::Record>> related = database.TopOfRelatedWorkloads(
      w.spec.op, device_class, w.key, /*per_workload=*/2, /*k=*/4 * k);
  if (!related.ok()) return seeds;
  std::set<std::vector<int64_t>> have;
  for (const Candidate& c : seeds) have.insert(c.decisions);
  for (const db::Record& r : *related) {
    if (static_cast<int>(seeds.size()) >= k) break;
    std::optional<Candidate> c = CachedSeed(cache != nullptr ? &cache->related : nullptr, r,
                                            [&](const ir::Trace& t) -> absl::StatusOr<Candidate> {
                                              if (t.decisions.empty())
                                                return absl::InvalidArgumentError("no decisions");
                                              return space.FromDecisions(t.sketch, t.decisions);
                                            });
    if (c.has_value() && have.insert(c->decisions).second) seeds.push_back(std::move(*c));
  }
  return seeds;
}

absl::StatusOr<std::vector<Candidate>> NextRound(const SearchSpace& space,
                                                 const cost_model::CostModel& model,
                                                 const std::vector<Candidate>& seeds,
                                                 const ProgramSet& measured, int batch,
                                                 const SearchOptions& options, std::mt19937_64& rng,
                                                 bool rule_picked_first) {
  std::vector<Candidate> first;
  if ((rule_picked_first || !model.trained()) && batch > 0) {
    for (Candidate& c : space.Heuristic(std::max(1, batch / 4))) {
      if (!measured.contains(ProgramOf(c))) first.push_back(std::move(c));
    }
  }
  // The search must not propose the rule-picked programs again (a small space's random
  // samples often find them): with some, it sees them as measured.
  ProgramSet with_first;
  if (!first.empty()) {
    with_first = measured;
    for (const Candidate& c : first) with_first.insert(ProgramOf(c));
  }
  absl::StatusOr<std::vector<Candidate>> next =
      NextBatch(space, model, seeds, first.empty() ? measured : with_first,
                batch - static_cast<int>(first.size()), options, rng);
  if (next.ok()) next->insert(next->begin(), first.begin(), first.end());
  return next;
}

db::Record MakeRecord(const std::string& workload, const std::string& workload_key, double flops,
                      const std::string& device_class, const std::string& trace_json,
                      const lathe::v1::MeasureResult& result, const std::string& worker) {
  db::Record r;
  r.candidate_id = result.candidate_id();
  r.workload = workload;
  r.workload_key = workload_key;
  r.device_class = device_class;
  r.trace_json = trace_json;
  r.repeats_us.assign(result.repeats_us().begin(), result.repeats_us().end());
  r.median_us = result.median_us();
  r.cv = result.cv();
  r.flops = flops;
  r.error_class = ErrorClassFromProto(result.error_class());
  r.error_msg = result.error_msg();
  r.worker = worker;
  r.lathe_version = kLatheVersion;
  r.measured_at_ms = NowUnixMs();
  if (r.error_class == db::ErrorClass::kOk && !(r.median_us > 0)) {
    r.error_class = db::ErrorClass::kRuntimeError;
    r.error_msg = "ok result without a positive median latency";
  }
  if (r.error_class != db::ErrorClass::kOk && !(r.median_us >= 0)) r.median_us = 0;
  return r;
}

absl::StatusOr<CpuTarget> CpuTargetForDeviceClass(const std::string& device_class) {
  std::optional<db::CpuDeviceClass> cpu = db::ParseCpuDeviceClass(device_class);
  if (!cpu.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device class '", device_class, "' is not a CPU class (cpu:<model>:<isa>:<N>c)"));
  }
  CpuTarget t;
  int bits = 128;
  if (cpu->isa == "avx512") {
    bits = 512;
  } else if (cpu->isa == "avx2" || cpu->isa == "avx") {
    bits = 256;
  } else if (cpu->isa == "scalar") {
    bits = 32;
  }
  t.vector_lanes = std::max(1, bits / 32);
  t.cores = std::max(1, cpu->cores);
  t.vector_registers = bits >= 512 ? 32 : 16;
  return t;
}

bool IsGpuDeviceClass(const std::string& device_class) {
  absl::StatusOr<ir::TargetKind> kind = ir::DeviceClassKind(device_class);
  return kind.ok() && *kind == ir::TargetKind::kCuda;
}

absl::StatusOr<std::unique_ptr<SearchSpace>> SpaceForDeviceClass(const ir::Workload& workload,
                                                                 const std::string& device_class) {
  absl::StatusOr<ir::Target> of = ir::TargetOfDeviceClass(device_class);
  if (of.ok() && of->is_gpu()) return CreateSearchSpace(workload, *of);
  if (!of.ok() && IsGpuDeviceClass(device_class)) return of.status();
  absl::StatusOr<CpuTarget> target = CpuTargetForDeviceClass(device_class);
  if (!target.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device class '", device_class,
        "' is neither a CPU class (cpu:<model>:<isa>:<N>c) nor a GPU class (cuda:<name> (sm_XX))"));
  }
  return SearchSpace::Create(workload, *target);
}

}  // namespace lathe::tuner
