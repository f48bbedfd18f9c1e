// \file
// TunerService::Report: a worker's results checked, sorted (held tasks, results restored from
// the task they carry, re-timings, unknown candidates), stored in one transaction and
// accounted to their jobs. The rest of the service: service.cc.
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/log_text.h"
#include "daemon/service_state.h"
#include "proto/trace_io.h"
#include "spdlog/spdlog.h"
#include "tuner/tune_common.h"

namespace lathe::daemon {

namespace {

// Report's checks of the request itself, before anything is looked up: every result names
// its candidate, has finite non-negative timings and a known error class; at most
// `max_tasks` tasks ride along.
absl::Status CheckReport(const v1::ReportRequest& req, int max_tasks) {
  if (req.worker_id().empty()) return absl::InvalidArgumentError("empty worker_id");
  for (int i = 0; i < req.results_size(); ++i) {
    const v1::MeasureResult& r = req.results(i);
    if (r.candidate_id().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("results[", i, "].candidate_id is empty"));
    }
    if (!std::isfinite(r.median_us()) || r.median_us() < 0 || !std::isfinite(r.cv()) ||
        r.cv() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("results[", i, "] ('", r.candidate_id(),
                                                     "'): median_us and cv must be finite and "
                                                     ">= 0"));
    }
    for (double v : r.repeats_us()) {
      if (!std::isfinite(v) || v < 0) {
        return absl::InvalidArgumentError(absl::StrCat("results[", i, "] ('", r.candidate_id(),
                                                       "'): repeats_us must be finite and >= 0"));
      }
    }
    if (!v1::ErrorClass_IsValid(r.error_class())) {
      return absl::InvalidArgumentError(absl::StrCat("results[", i, "]: unknown error class"));
    }
    // A worker without the device hands the task back (its Measurer's FailedPrecondition);
    // no_device says nothing about the candidate and is never stored.
    if (r.error_class() == v1::NO_DEVICE) {
      return absl::InvalidArgumentError(
          absl::StrCat("results[", i, "] ('", r.candidate_id(),
                       "'): no_device is not a measurement (hand the task back instead)"));
    }
  }
  if (req.tasks_size() > max_tasks) {
    return absl::InvalidArgumentError(
        absl::StrCat(req.tasks_size(), " tasks (at most ", max_tasks, ")"));
  }
  return absl::OkStatus();
}

// A held re-timing task's result: its repeats added to the stored record (AddRepeats), or why
// not. Logged; never a trial (StoredResult::remeasure).
StoredResult AddRetiming(db::Database& database, const v1::MeasureResult& m,
                         const DispatchedTask& task, const std::string& worker_id) {
  StoredResult p;
  p.job_id = task.task.job_id();
  p.workload = task.workload;
  p.candidate_id = m.candidate_id();
  p.remeasure = true;
  std::string why;
  if (m.error_class() != v1::OK) {
    p.error_class = tuner::ErrorClassFromProto(m.error_class());
    why = absl::StrCat(std::string(db::ErrorClassName(p.error_class)), ": ", m.error_msg());
  } else if (m.repeats_us().empty()) {
    p.error_class = db::ErrorClass::kRuntimeError;
    why = "ok result without repeats";
  } else {
    std::vector<double> repeats(m.repeats_us().begin(), m.repeats_us().end());
    absl::StatusOr<db::Record> updated =
        database.AddRepeats(m.candidate_id(), repeats, tuner::NowUnixMs());
    if (updated.ok()) {
      p.error_class = db::ErrorClass::kOk;
      p.median_us = updated->median_us;
      p.gflops = updated->Gflops();
    } else {
      p.error_class = db::ErrorClass::kRuntimeError;
      why = updated.status().ToString();
    }
  }
  if (p.error_class == db::ErrorClass::kOk) {
    spdlog::info("event=remeasured job={} candidate={} median_us={:.3f} repeats={}", p.job_id,
                 p.candidate_id, p.median_us, m.repeats_us_size());
  } else {
    spdlog::warn("event=remeasure_failed job={} candidate={} worker={} reason=\"{}\"", p.job_id,
                 p.candidate_id, worker_id, why);
  }
  return p;
}

}  // namespace

// --- TunerService::Report, step by step ---

absl::StatusOr<v1::ReportResponse> TunerService::Report(const v1::ReportRequest& req) {
  if (absl::Status st = CheckReport(req, s_->options.max_tasks_per_lease); !st.ok()) return st;
  if (Metrics* m = s_->metrics()) m->AddReport();

  // 1. Records for the candidates this daemon holds and leased to this worker under this
  // lease (copies only; no lock is held here).
  absl::StatusOr<std::string> authorized =
      s_->registry.AuthorizeReport(req.worker_id(), req.worker_secret());
  if (!authorized.ok()) return authorized.status();
  ReportPlan plan = s_->PlanReport(req, *authorized);

  // 2. One transaction; acknowledged only after its commit.
  std::vector<db::InsertResult> inserted;
  if (!plan.records.empty()) {
    absl::StatusOr<std::vector<db::InsertResult>> ins = s_->db->InsertBatch(plan.records);
    if (!ins.ok()) return ins.status();
    inserted = std::move(*ins);
  }
  v1::ReportResponse resp;
  std::vector<StoredResult> progress;
  const int64_t retimed_now = s_->ClaimRetimings(req, plan, &resp, &progress);
  if (absl::Status st = s_->CountUnknown(req, plan, &resp); !st.ok()) return st;

  // 3. Progress: whoever still finds a held task accounts for it, once; a restored result
  // counts when it was newly stored.
  const int64_t stored_now = s_->AccountStored(req, plan, inserted, &resp, &progress);
  s_->runner.Account(progress);
  s_->registry.AddMeasured(req.worker_id(), stored_now + retimed_now);
  return resp;
}

ReportPlan TunerService::State::PlanReport(const v1::ReportRequest& req,
                                           const std::string& worker) {
  ReportPlan plan;
  std::vector<std::string> ids;
  {
    std::set<std::string> in_request;
    for (const v1::MeasureResult& m : req.results()) {
      if (!in_request.insert(m.candidate_id()).second) continue;  // repeated in this request
      plan.results.push_back(&m);
      ids.push_back(m.candidate_id());
    }
  }
  const LeaseHolder holder{req.worker_id(), req.lease_id()};
  std::vector<bool> foreign;
  std::vector<HeldTask> held = registry.Find(ids, &holder, &foreign);
  // A candidate the daemon does not hold (it restarted since the lease) counts when the
  // request carries its task and the task still belongs to a running job (RestoreFromTask).
  std::map<std::string, const v1::Task*> sent_tasks;
  for (const v1::Task& t : req.tasks()) sent_tasks.emplace(t.candidate_id(), &t);

  for (size_t k = 0; k < plan.results.size(); ++k) {
    const v1::MeasureResult& m = *plan.results[k];
    if (foreign[k]) {
      // Held, but not leased to this worker under this lease: not its result to give, unless
      // it is a trial the worker kept across a restart of the daemon (its task sent along)
      // that the resumed job dispatched again.
      auto sent = sent_tasks.find(m.candidate_id());
      if (held[k]->task.remeasure() || sent == sent_tasks.end() ||
          sent->second->job_id() != held[k]->task.job_id() ||
          !traceio::SameRequestTrace(sent->second->request(), held[k]->task.request())) {
        plan.Unknown(m.candidate_id(), "not leased to this worker under this lease");
        continue;
      }
    }
    if (held[k] && held[k]->task.remeasure()) {
      plan.retimes.push_back(k);
      continue;
    }
    const v1::Task* task = held[k] ? &held[k]->task : nullptr;
    std::optional<Restored> rest;
    std::string workload_key;
    double flops = 0;
    if (task != nullptr) {
      if (auto info = runner.Workload(task->job_id(), held[k]->workload); info.has_value()) {
        workload_key = info->key;
        flops = info->flops;
      } else {
        workload_key = ir::WorkloadKey(task->request().workload());
      }
    } else {
      auto sent = sent_tasks.find(m.candidate_id());
      if (sent == sent_tasks.end()) {
        plan.Unknown(m.candidate_id(), "not dispatched by this daemon and sent without its task");
        continue;
      }
      const v1::Task& t = *sent->second;
      if (t.remeasure()) {
        // Its repeats may have been added already (a retry whose first answer was lost):
        // only the held task's first report adds them.
        plan.Unknown(m.candidate_id(), "a re-timing this daemon no longer holds");
        continue;
      }
      absl::StatusOr<Restored> restored = RestoreFromTask(t, m, &workload_key, &flops);
      if (!restored.ok()) {
        plan.Unknown(m.candidate_id(), std::string(restored.status().message()));
        continue;
      }
      task = &t;
      rest = std::move(*restored);
    }
    const bool stored_form = held[k] && !held[k]->trace_json.empty();
    db::Record r = tuner::MakeRecord(
        task->request().workload(), workload_key, flops, task->device_class(),
        stored_form ? held[k]->trace_json : traceio::RequestTraceJson(task->request()), m, worker);
    plan.records.push_back(std::move(r));
    plan.restored.push_back(std::move(rest));
  }
  return plan;
}

absl::StatusOr<Restored> TunerService::State::RestoreFromTask(const v1::Task& t,
                                                              const v1::MeasureResult& m,
                                                              std::string* workload_key,
                                                              double* flops) {
  absl::StatusOr<ir::Workload> w = ir::MakeWorkload(t.request().workload());
  absl::StatusOr<int> index =
      !w.ok() ? absl::StatusOr<int>(w.status())
              : runner.KnownWorkload(t.job_id(), w->canonical, t.device_class());
  ir::ProgramId program;
  if (index.ok()) {
    program = traceio::RequestProgramId(t.request());
    if (tuner::CandidateId(w->key, program, t.device_class()) != m.candidate_id()) {
      index = absl::InvalidArgumentError("the candidate id does not match its task's trace");
    }
  }
  if (!index.ok()) return index.status();
  *workload_key = w->key;
  *flops = w->flops;
  return Restored{t.job_id(), *index, program};
}

int64_t TunerService::State::ClaimRetimings(const v1::ReportRequest& req, const ReportPlan& plan,
                                            v1::ReportResponse* resp,
                                            std::vector<StoredResult>* progress) {
  if (plan.retimes.empty()) return 0;
  int64_t retimed_now = 0;  // re-timings claimed (their repeats added, or failed)
  std::vector<std::string> retime_ids;
  for (size_t k : plan.retimes) retime_ids.push_back(plan.results[k]->candidate_id());
  // Claimed first, so that of two reports of one re-timing (a retry racing the original)
  // exactly one adds its repeats.
  std::vector<HeldTask> claimed = registry.Complete(retime_ids, req.lease_id());
  for (size_t j = 0; j < plan.retimes.size(); ++j) {
    const v1::MeasureResult& m = *plan.results[plan.retimes[j]];
    if (!claimed[j]) {
      resp->set_duplicates(resp->duplicates() + 1);
      continue;
    }
    StoredResult p = AddRetiming(*db, m, *claimed[j], req.worker_id());
    if (Metrics* mt = metrics()) mt->AddRemeasure(p.error_class == db::ErrorClass::kOk);
    resp->set_accepted(resp->accepted() + 1);
    ++retimed_now;
    progress->push_back(std::move(p));
  }
  return retimed_now;
}

absl::Status TunerService::State::CountUnknown(const v1::ReportRequest& req, const ReportPlan& plan,
                                               v1::ReportResponse* resp) {
  for (size_t k = 0; k < plan.unknown.size(); ++k) {
    absl::StatusOr<std::optional<db::Record>> existing = db->GetByCandidateId(plan.unknown[k]);
    if (!existing.ok()) return existing.status();
    if (existing->has_value()) {
      resp->set_duplicates(resp->duplicates() + 1);
    } else {
      resp->set_rejected(resp->rejected() + 1);
      spdlog::warn("event=report_rejected worker={} candidate=\"{}\" reason=\"{}\"",
                   req.worker_id(), LogText(plan.unknown[k]), LogText(plan.why_unknown[k], 1024));
    }
  }
  return absl::OkStatus();
}

int64_t TunerService::State::AccountStored(const v1::ReportRequest& req, const ReportPlan& plan,
                                           const std::vector<db::InsertResult>& inserted,
                                           v1::ReportResponse* resp,
                                           std::vector<StoredResult>* progress) {
  const std::vector<db::Record>& records = plan.records;
  std::vector<std::string> held_ids;
  std::vector<size_t> held_record;
  for (size_t k = 0; k < records.size(); ++k) {
    if (!plan.restored[k].has_value()) {
      held_ids.push_back(records[k].candidate_id);
      held_record.push_back(k);
    }
  }
  std::vector<HeldTask> completed = registry.Complete(held_ids);
  auto account = [&](const db::Record& r, const std::string& job_id, int workload,
                     std::optional<ir::ProgramId> program) {
    StoredResult p;
    p.job_id = job_id;
    p.workload = workload;
    p.candidate_id = r.candidate_id;
    p.program = program;
    p.error_class = r.error_class;
    p.median_us = r.median_us;
    p.gflops = r.Gflops();
    progress->push_back(std::move(p));
  };
  for (size_t h = 0; h < held_ids.size(); ++h) {
    if (!completed[h]) continue;
    account(records[held_record[h]], completed[h]->task.job_id(), completed[h]->workload,
            std::nullopt);
  }
  int64_t stored_now = 0;
  int restored_now = 0;
  for (size_t k = 0; k < records.size(); ++k) {
    const db::Record& r = records[k];
    if (inserted[k].inserted) {
      resp->set_accepted(resp->accepted() + 1);
      ++stored_now;
      if (Metrics* m = metrics()) m->AddResult(db::ErrorClassName(r.error_class));
      if (plan.restored[k].has_value()) {
        ++restored_now;
        account(r, plan.restored[k]->job_id, plan.restored[k]->workload, plan.restored[k]->program);
      }
    } else {
      resp->set_duplicates(resp->duplicates() + 1);
    }
  }
  if (restored_now > 0) {
    spdlog::info("event=report_restored worker={} results={}", req.worker_id(), restored_now);
  }
  return stored_now;
}

}  // namespace lathe::daemon
