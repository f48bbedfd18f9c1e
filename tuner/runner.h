// \file
// Runner: where the tuning driver's candidates get measured (DESIGN.md "One tuning driver").
// The embedded `lathe tune` measures them one by one in a sandboxed child on this machine
// (tuner/local_runner.h); lathed queues them for its workers' leases and hears of their results
// through Report (daemon/job_runner.cc). The driver (tuner/driver.h) is the same for both: it
// asks the runner how much it may dispatch, hands it trials, waits for outcomes and, at the end
// of a run, has it re-time the best records. A runner stores what it measures in the tuning
// database with MakeRecord (tune_common.h), so that a record is built one way whoever measured.
//
// Thread-safety: a runner is driven by one driver thread; implementations synchronise with
// whatever else feeds them (lathed's report threads).
#ifndef LATHE_TUNER_RUNNER_H_
#define LATHE_TUNER_RUNNER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "db/record.h"
#include "ir/trace.h"
#include "lathe/v1/measure.pb.h"

namespace lathe::tuner {

// A candidate to measure for task `task` of the run.
struct Trial {
  int task = 0;
  std::string candidate_id;
  lathe::v1::MeasureRequest request;  // workload, trace (message form), timing options
  // The trace as its record stores it (traceio::TraceToJson, made beside the search); empty:
  // derived from the request when the record is made.
  std::string trace_json;
};

// What became of a trial, or a result the runner learnt of on its own.
struct TrialOutcome {
  enum class Kind {
    kMeasured,   // a dispatched trial's result, stored
    kWithdrawn,  // a dispatched trial taken back unmeasured: the search may propose it again
    kForeign,    // a stored result of the task this driver did not dispatch (lathed: a worker's
                 // spool across a restart); `program` names its program
  };
  Kind kind = Kind::kMeasured;
  int task = 0;
  std::string candidate_id;
  ir::ProgramId program;  // kForeign only
  db::ErrorClass error_class = db::ErrorClass::kOk;
  double median_us = 0;
  bool counted = true;  // counted as a trial of the run (false past a budget or target)
};

// A stored record to time again for longer (the end of a run).
struct RetimeRequest {
  int task = 0;
  std::string candidate_id;
  std::string workload;  // canonical spec
  std::string trace_json;
  bool cold_weights = false;  // MeasureRequest.cold_weights, as the task's trials were timed
};

class Runner {
 public:
  virtual ~Runner() = default;

  // Trials of task `task` the runner counts as done (measured and counted) and as outstanding
  // (dispatched, not reported).
  struct Counts {
    int done = 0;
    int outstanding = 0;
  };
  virtual Counts Progress(int task) = 0;
  // How many trials the driver may dispatch now; 0: wait for outcomes first.
  virtual int Room() = 0;
  // Hands trials over (they become outstanding). Returns the candidate ids it did not take
  // because someone else stored them since the driver read the database (lathed: two jobs of
  // one workload); they are measured all the same, so the driver does not propose them again.
  virtual absl::StatusOr<std::vector<std::string>> Dispatch(std::vector<Trial> trials) = 0;
  // Blocks until outcomes are available, the run must stop, or (when `until_room`) Room()
  // is positive; may return empty (a poll interval passed). A status is fatal to the run (the
  // sandbox failed, the database cannot be written).
  virtual absl::StatusOr<std::vector<TrialOutcome>> Wait(bool until_room) = 0;
  // Makes a Wait in progress return soon (or the next one at once): a search the driver runs
  // in the background has ended (DriverOptions::search_pool). Called from any thread.
  virtual void Wake() {}
  // True once the run must end now (stop flag, cancelled job, daemon shutting down).
  virtual bool Stopping() = 0;
  // Called once when the driver's loop ends (budget spent, stopped, or failed): a runner that
  // buffers results stores them now.
  virtual absl::Status Finish() { return absl::OkStatus(); }
  // Called once when the run has all its trials, before any Retime.
  virtual void TrialsFinished() {}
  // Times the records again for `ms` each and adds the repeats to them (db AddRepeats);
  // returns, per request, whether repeats were added. Blocks until all are done or the run
  // must stop (the rest count as not added). `progress(done, total)` may be called as it goes.
  virtual absl::StatusOr<std::vector<bool>> Retime(
      const std::vector<RetimeRequest>& requests, double ms,
      const std::function<void(int done, int total)>& progress) = 0;
};

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_RUNNER_H_
