// \file
// `lathe tune` (CONTRACT.md "The CLI"), the embedded default: tunes one workload in-process,
// measuring in a sandboxed child, with a progress bar on stderr; Ctrl-C stops after the
// current candidate and keeps every result. It ends by printing the best record, the library
// figure beside it when there is one (OpenBLAS sgemm for matmul and batch_matmul), where the
// record is stored and how to build it; `--json` prints one object on stdout instead, and
// `--plot FILE` writes the tuning curve as SVG.
#ifndef LATHE_TOOLS_CLI_TUNE_H_
#define LATHE_TOOLS_CLI_TUNE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lathe::tools {

struct TuneCliOptions {
  std::string workload;        // --workload SPEC (required)
  std::string target = "cpu";  // --target
  int trials = 300;            // --trials N
  int batch = 64;              // --batch N
  std::string db_path;         // --db; empty: DefaultDbPath()
  std::string tuner;           // --tuner HOST:PORT (not available in this build)
  bool json = false;           // --json
  std::string plot;            // --plot FILE
  uint64_t seed = 0;           // --seed S (0: from the clock)
  double min_repeat_ms = 100;  // --min-repeat-ms X
  bool no_baseline = false;    // --no-baseline: skip the library measurement
};

// Runs `lathe tune` and returns the exit status: 0 success (also when stopped by Ctrl-C),
// 2 bad usage or a malformed spec, 1 any other failure, including a run that ends without a
// single ok record for the workload.
int RunTune(const TuneCliOptions& options);

// The tuning curve as a standalone SVG document: best GFLOP/s against the trial index, with
// axes and ticks, the library figure as a dashed horizontal line when `library_gflops` > 0,
// and `title` on top. `curve` holds (trial, GFLOP/s) points; it may be empty.
std::string TuningCurveSvg(const std::vector<std::pair<int, double>>& curve, double library_gflops,
                           const std::string& library_name, const std::string& title);

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_CLI_TUNE_H_
