// \file
// The multi-task side of `lathe tune` (CONTRACT.md: several `--workload`s, `--tasks FILE`):
// reading the tasks, the progress display (one line per task and the objective), and the
// summary or JSON of a multi-task run. Shared by the embedded run and the `--tuner` one.
#ifndef LATHE_TOOLS_CLI_TASKS_H_
#define LATHE_TOOLS_CLI_TASKS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/cli_tune.h"
#include "tuner/tune.h"

namespace lathe::tools {

// The tasks of a run: the --workload specs (weight 1), then a --model's tasks, then the lines
// of the --tasks file (JSON lines `{"workload": SPEC, "weight": W}`, weight 1 when absent; blank
// lines and lines starting with '#' are skipped), with canonical specs. InvalidArgument naming
// the spec, or the file and the line, for a malformed line, an unknown op or key, a weight that
// is not a positive number, a workload given twice, a file that cannot be read or holds no
// task.
absl::StatusOr<std::vector<tuner::TuneTask>> CollectTasks(const TuneCliOptions& options);

// The progress display of a multi-task run: the run's bar with the objective, then one line per
// task (its weight, trials, best latency and GFLOP/s).
std::vector<std::string> TaskProgressLines(const tuner::TuneProgress& p);

// Shows TaskProgressLines: on a terminal as a block redrawn in place (lines cut to its width),
// otherwise as plain lines at the end of each round (the bar and the tasks that moved).
class TaskProgressPrinter {
 public:
  explicit TaskProgressPrinter(bool tty);
  void Update(const tuner::TuneProgress& p);
  // Leaves the cursor under the block.
  void Finish();

 private:
  bool tty_;
  int drawn_ = 0;  // lines of the block on the terminal
  std::vector<int> printed_trials_;
};

// The end of a multi-task `lathe tune`: prints the summary (or, with --json, one object on
// stdout: the single-workload fields for the first task, `trials` and `errors` of the run, plus
// `tasks` and `objective_us`). Returns the exit status: 1 when a task has no ok record (except
// for a detached remote run), else 0.
int FinishTasks(const TuneCliOptions& options, const tuner::TuneResult& result,
                const TuneWhere& where);

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_CLI_TASKS_H_
