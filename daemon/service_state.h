// \file
// Internal to daemon/: TunerService's state, shared by service.cc (jobs, queries, the
// workers' registration and leases) and service_report.cc (the workers' reports).
#ifndef LATHE_DAEMON_SERVICE_STATE_H_
#define LATHE_DAEMON_SERVICE_STATE_H_

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "codegen/host.h"
#include "daemon/job_runner.h"
#include "daemon/lease_registry.h"
#include "daemon/metrics.h"
#include "daemon/service.h"
#include "db/database.h"
#include "db/record.h"
#include "ir/target.h"
#include "ir/trace.h"

namespace lathe::daemon {

namespace v1 = lathe::v1;

// The job, workload and program key of a result whose task the daemon no longer holds (it
// restarted since the lease) but the report carried, for a job that still runs.
struct Restored {
  std::string job_id;
  int workload = 0;
  ir::ProgramId program;
};

// A report's results sorted by what becomes of them (Report's step 1).
struct ReportPlan {
  std::vector<const v1::MeasureResult*> results;  // each candidate id once, in request order
  std::vector<db::Record> records;                // to store
  std::vector<std::optional<Restored>> restored;  // parallel to `records`
  std::vector<std::string> unknown;               // neither held nor restorable
  std::vector<std::string> why_unknown;           // parallel to `unknown`
  std::vector<size_t> retimes;                    // indices into `results` of held re-timings

  void Unknown(const std::string& candidate_id, std::string why) {
    unknown.push_back(candidate_id);
    why_unknown.push_back(std::move(why));
  }
};

struct TunerService::State {
  State(const ServiceOptions& o, std::unique_ptr<db::Database> database);

  ServiceOptions options;
  std::unique_ptr<db::Database> db;  // the service's connection (Report, Submit, queries)
  LeaseRegistry registry;
  JobRunner runner;  // after `registry`: destroyed (its threads joined) first
  std::once_flag shutdown_once;

  Metrics* metrics() { return options.metrics; }

  // Report's steps (service_report.cc). PlanReport sorts the results
  // of a request from `worker`: records to store (held tasks, or restored by
  // RestoreFromTask), held re-timings, and unknown candidates with the reason.
  ReportPlan PlanReport(const v1::ReportRequest& req, const std::string& worker);
  // The job and workload of a sent task's result, with its workload key and FLOPs; an error
  // saying why the result cannot be restored.
  absl::StatusOr<Restored> RestoreFromTask(const v1::Task& t, const v1::MeasureResult& m,
                                           std::string* workload_key, double* flops);
  // Claims the held re-timings and adds their repeats; returns how many were claimed.
  int64_t ClaimRetimings(const v1::ReportRequest& req, const ReportPlan& plan,
                         v1::ReportResponse* resp, std::vector<StoredResult>* progress);
  // Unknown candidates already stored count as duplicates, the others as rejected (logged).
  absl::Status CountUnknown(const v1::ReportRequest& req, const ReportPlan& plan,
                            v1::ReportResponse* resp);
  // Counts the inserted records and accounts the progress of held and restored ones; returns
  // how many were newly stored.
  int64_t AccountStored(const v1::ReportRequest& req, const ReportPlan& plan,
                        const std::vector<db::InsertResult>& inserted, v1::ReportResponse* resp,
                        std::vector<StoredResult>* progress);

  // The device class of a job or query without one (see the header).
  absl::StatusOr<std::string> DeriveDeviceClass(const std::string& target) {
    // Real GPUs only for a cuda job: an emulated GPU's class is never taken for one.
    std::vector<std::string> classes =
        registry.DeviceClasses(target == "cpu" ? ir::TargetKind::kCpu : ir::TargetKind::kCuda);
    if (target != "cpu") {
      if (!classes.empty()) return classes.front();
      return absl::InvalidArgumentError(absl::StrCat(
          "target '", target, "' needs a device_class (registered GPU classes: none)"));
    }
    const std::string host = codegen::HostDeviceClass();
    if (classes.empty() || std::find(classes.begin(), classes.end(), host) != classes.end()) {
      return host;
    }
    return classes.front();
  }
};

}  // namespace lathe::daemon

#endif  // LATHE_DAEMON_SERVICE_STATE_H_
