// \file
// The model subcommands (CONTRACT.md "The CLI"): `lathe model tasks`, `lathe run --model`,
// `lathe build --model`, and the task list that `lathe tune --model` tunes. Usage and model
// errors (unreadable or invalid files, unsupported ops, wrong shapes) exit 2 and write nothing.
#ifndef LATHE_TOOLS_CLI_MODEL_H_
#define LATHE_TOOLS_CLI_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/cli_tune.h"
#include "tuner/tune.h"

namespace CLI {
class App;
}

namespace lathe::tools {

struct ModelCliOptions {
  std::string model;
  std::vector<std::string> inputs;  // NAME=SHAPE
  std::string db_path;
  // Activation layout: "blocked" (nchw{b}c between convolutions, b from the host's vector
  // lanes), "nchw" (plain), or "nchw{b}c" (blocked with at most b channels per block).
  std::string layout = "blocked";
  bool json = false;
  // cpu (default), or a GPU: cuda, cuda:N, cuda-emu:sm_XX (the GPU emulator); model tasks
  // takes cuda:sm_XX too. GPU targets compile the model in plain NCHW (`layout` is the CPU's).
  std::string target = "cpu";
  // GPU targets: fp32 (default) or tf32 (kernels may use TF32 tensor cores).
  std::string gpu_math = "fp32";
  // run
  std::vector<std::string> feeds;  // NAME=FILE
  std::string dump_dir;
  int repeat = 10;
  bool profile = false;
  // build
  std::string out;
  // Untuned: every kernel uses its default schedule (the database is not read).
  bool default_schedules = false;
};

// `lathe model tasks --model F [--input NAME=SHAPE ...] [--json]`.
int RunModelTasks(const ModelCliOptions& o);
// `lathe run --model F ...`: compiles in-process (JIT) and runs.
int RunModelRun(const ModelCliOptions& o);
// `lathe build --model F ... --out model.so`.
int RunModelBuild(const ModelCliOptions& o);

// Adds `lathe model tasks` and `lathe run` to `app`; `Dispatch` runs the one parsed (returns
// -1 when neither was).
struct ModelCommands {
  ModelCliOptions tasks, run;
  CLI::App* model = nullptr;
  CLI::App* model_tasks = nullptr;
  CLI::App* run_cmd = nullptr;
};
void AddModelCommands(CLI::App& app, ModelCommands* cmds);
int DispatchModelCommands(const ModelCommands& cmds);

// `lathe tune --model F [--input ...]`: hands the model's tasks, with their weights, to the
// tune in tune->model_tasks (the model compiled for tune->target: a GPU target's tasks are
// those of its plain-NCHW kernels). --model excludes --workload and --tasks. Returns 0, or the
// exit status after printing the error (2 for usage and model errors, and for a model without
// a task to tune: nothing is tuned or written).
int PrepareModelTune(const std::string& model, const std::vector<std::string>& inputs,
                     const std::string& layout, TuneCliOptions* tune);

// The tuning tasks of a model (model/tasks.h: each distinct workload with its weight), compiled
// for `target` with `layout`; the model's error (input shapes, import, compile) otherwise.
absl::StatusOr<std::vector<tuner::TuneTask>> ModelTuneTasks(const std::string& model,
                                                            const std::vector<std::string>& inputs,
                                                            const std::string& layout,
                                                            const std::string& target = "cpu");

// The compile options of a --layout value (see ModelCliOptions::layout); InvalidArgument for
// an unknown one.
struct LayoutChoice {
  int64_t block_lanes = 0;
  // Constant matmul weights in panels of two host vectors, whatever the activation layout.
  int64_t weight_panel = 0;
  // Dense 3x3 convolutions as Winograd F(m x m, 3 x 3) (blocked layouts).
  bool winograd = false;
  // A depthwise convolution and the 1x1 convolution reading it as one sepconv2d kernel.
  bool separable = true;
};
absl::StatusOr<LayoutChoice> ParseLayoutOption(const std::string& layout);

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_CLI_MODEL_H_
