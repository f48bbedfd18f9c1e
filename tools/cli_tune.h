// \file
// `lathe tune` (CONTRACT.md "The CLI"), the embedded default: tunes one workload (or several
// tasks sharing one trial budget: tools/cli_tasks.h) in-process, measuring in a sandboxed
// child, with a progress bar on stderr; Ctrl-C stops after the current candidate and keeps
// every result. It ends by printing the best record, the library figure beside it when there
// is one (OpenBLAS sgemm for matmul and batch_matmul), where the record is stored and how to
// build it; `--json` prints one object on stdout instead, and `--plot FILE` writes the tuning
// curve as SVG.
#ifndef LATHE_TOOLS_CLI_TUNE_H_
#define LATHE_TOOLS_CLI_TUNE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/workload.h"
#include "tuner/tune.h"

namespace lathe::tools {

struct TuneCliOptions {
  std::vector<std::string> workloads;  // --workload SPEC, repeatable
  std::string tasks_file;              // --tasks FILE: JSON lines {"workload", "weight"}
  // --model F: the model's tasks with their weights, handed over as they are (cli_model.h).
  std::vector<tuner::TuneTask> model_tasks;
  std::string scheduler = "gradient";  // --scheduler (several tasks)
  std::string target = "cpu";          // --target
  std::string gpu_math = "fp32";       // --gpu-math fp32|tf32 (GPU targets)
  int trials = 300;                    // --trials N
  int max_trials_per_task = 0;         // --max-trials-per-task N (several tasks; 0: no cap)
  // --weights cold|warm: parameters evicted before each timed call or not (empty: warm).
  std::string weights;
  int batch = 64;                    // --batch N
  std::string db_path;               // --db; empty: DefaultDbPath()
  std::string tuner;                 // --tuner HOST:PORT: submit to lathed (tools/cli_remote.h)
  std::string token_file;            // --token-file F (with --tuner)
  std::string tls_ca;                // --tls-ca F (with --tuner)
  bool cancel_on_interrupt = false;  // --cancel-on-interrupt: Ctrl-C cancels the remote job
  bool json = false;                 // --json
  std::string plot;                  // --plot FILE
  uint64_t seed = 0;                 // --seed S (0: from the clock)
  double min_repeat_ms = 100;        // --min-repeat-ms X
  bool no_baseline = false;          // --no-baseline: skip the library measurement
  int remeasure_top = 5;             // --remeasure-top N (0: off)
  bool remeasure_top_given = false;  // --remeasure-top was on the command line (--tuner: else
                                     // the daemon's default)
};

// Runs the embedded `lathe tune` (options.tuner must be empty) and returns the exit status: 0
// success (also when stopped by Ctrl-C), 2 bad usage or a malformed spec, 1 any other failure,
// including a run that ends without a single ok record for the workload.
int RunTune(const TuneCliOptions& options);

// Whether --weights asks for cold weights: InvalidArgument naming the value unless it is
// empty (warm), "warm" or "cold". Read by the embedded and the remote tune alike.
absl::StatusOr<bool> ColdWeights(const std::string& weights);

// The progress bar line of `lathe tune`: bar, trials, best GFLOP/s, errors, time left.
std::string ProgressLine(const tuner::TuneProgress& p);

// Where the result of a run lives, for the summary that FinishTune prints.
struct TuneWhere {
  std::string tuner;      // HOST:PORT of lathed; empty for the embedded tuner
  std::string job_id;     // the daemon's job
  std::string state;      // the job's state when the client stopped following it
  bool detached = false;  // the client stopped following a job that goes on
};

// The end of `lathe tune`, embedded or remote: measures the library baseline (unless
// --no-baseline, or the run was on another device class), writes --plot, and prints the
// summary (or, with --json, one object on stdout). Returns the exit status: 1 when no ok
// record exists for the workload (except for a detached remote run), else 0.
int FinishTune(const TuneCliOptions& options, const ir::Workload& workload,
               const tuner::TuneResult& result, const TuneWhere& where);

// The tuning curve as a standalone SVG document: best GFLOP/s against the trial index, with
// axes and ticks, the library figure as a dashed horizontal line when `library_gflops` > 0,
// and `title` on top. `curve` holds (trial, GFLOP/s) points; it may be empty.
std::string TuningCurveSvg(const std::vector<std::pair<int, double>>& curve, double library_gflops,
                           const std::string& library_name, const std::string& title);

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_CLI_TUNE_H_
