// lathe: the command-line interface (CONTRACT.md "The CLI").
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "codegen/host.h"
#include "tools/cli_build.h"
#include "tools/cli_common.h"
#include "tools/cli_db.h"
#include "tools/cli_model.h"
#include "tools/cli_remote.h"
#include "tools/cli_tune.h"
#include "tools/cli_verify.h"
#include "tools/db_option.h"

namespace {

constexpr int kUsageError = 2;

// --tuner, --token-file and --tls-ca of the commands that can talk to lathed.
void AddRemoteOptions(CLI::App* cmd, std::string* tuner, std::string* token_file,
                      std::string* tls_ca, const char* tuner_help) {
  cmd->add_option("--tuner", *tuner, tuner_help);
  cmd->add_option("--token-file", *token_file, "file holding the daemon's shared secret");
  cmd->add_option("--tls-ca", *tls_ca, "PEM file of the CA of the daemon's TLS certificate");
}

int Main(int argc, char** argv) {
  if (absl::Status isa = lathe::codegen::CheckCpuIsaCap(); !isa.ok()) {
    std::fprintf(stderr, "lathe: %s\n", std::string(isa.message()).c_str());
    return kUsageError;
  }
  CLI::App app{"lathe: finds the fastest correct program for a tensor operator and keeps it"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "lathe 0.1.0");

  lathe::tools::BuildOptions build;
  CLI::App* b = app.add_subcommand("build", "compile a workload's schedule into a kernel");
  lathe::tools::ModelCliOptions build_model;
  CLI::Option* build_workload =
      b->add_option("--workload", build.workload, "workload spec, e.g. matmul:m=512,n=512,k=512");
  CLI::Option* build_model_opt =
      b->add_option("--model", build_model.model, "build an ONNX model into one library instead");
  build_workload->excludes(build_model_opt);
  b->add_option("--input", build_model.inputs, "with --model: NAME=SHAPE (repeatable)");
  b->add_option("--layout", build_model.layout,
                "with --model: activation layout: blocked (default), nchw or nchw{b}c");
  b->add_option("--out", build.out, "output file")->required();
  b->add_option("--name", build.name, "exported symbol (default: lathe_<op>_<key>)");
  b->add_option("--target", build.target, "cpu (default), cuda, cuda:N, cuda:sm_XX");
  b->add_option("--db", build.db_path,
                std::string(lathe::tools::kDbHelp) +
                    " (default: $LATHE_DB or ~/.local/share/lathe/tuning.db)")
      ->check(lathe::tools::DatabaseLocationCheck());
  b->add_option("--trace", build.trace_file, "build this schedule trace (JSON) instead");
  b->add_option("--schedule", build.schedule,
                "'default' builds the untuned schedule, 'rule' the search space's rule-picked "
                "first candidate (what an untuned model step gets), 'rule:N' its N-th");
  b->add_option("--emit", build.emit,
                "so (default), obj, llvm, lowered (the loop program after lowering), trace (the "
                "schedule's trace, JSON), cuda, ptx");
  b->add_option("--gpu-math", build.gpu_math,
                "cuda targets with --schedule rule[:N]: fp32 (default) or tf32 (the rule may "
                "pick TF32 tensor-core kernels)")
      ->check(CLI::IsMember({"fp32", "tf32"}));
  lathe::tools::ModelCommands model_cmds;
  lathe::tools::AddModelCommands(app, &model_cmds);

  lathe::tools::QueryOptions query;
  CLI::App* q = app.add_subcommand("query", "print the best record of a workload");
  q->add_option("--workload", query.workload, "workload spec")->required();
  q->add_option("--target", query.target,
                "cpu (default), a device class (cpu:<model>:<isa>:<N>c, 'cuda:<name> (sm_XX)') or "
                "cuda-emu:sm_XX");
  q->add_option("--db", query.db_path, lathe::tools::kDbHelp)
      ->check(lathe::tools::DatabaseLocationCheck());
  q->add_option("--device-class", query.device_class, "query another device class");
  q->add_flag("--allow-other-core-count", query.allow_other_core_count,
              "use the record of the same CPU model with another core count when there is "
              "none for this one (the output says so)");
  q->add_flag("--json", query.json, "print one JSON object");
  lathe::tools::RemoteOptions query_remote;
  AddRemoteOptions(q, &query_remote.tuner, &query_remote.token_file, &query_remote.tls_ca,
                   "query a lathed daemon's database instead (HOST:PORT)");

  std::string db_sub, db_path, db_file;
  bool db_json = false;
  CLI::App* d = app.add_subcommand("db", "inspect and move the tuning database");
  d->add_option("command", db_sub, "stats | export | import | verify")
      ->required()
      ->check(CLI::IsMember({"stats", "export", "import", "verify"}));
  d->add_option("file", db_file, "export: output file (default stdout); import: input file");
  d->add_option("--db", db_path, lathe::tools::kDbHelp)
      ->check(lathe::tools::DatabaseLocationCheck());
  d->add_flag("--json", db_json, "print one JSON object (stats)");

  lathe::tools::TuneCliOptions tune;
  CLI::App* t = app.add_subcommand(
      "tune", "tune a workload: on this machine (embedded), or as a lathed job (--tuner)");
  t->add_option("--workload", tune.workloads,
                "workload spec, e.g. matmul:m=512,n=512,k=512; repeat it to tune several "
                "workloads under one budget");
  t->add_option("--tasks", tune.tasks_file,
                "JSON lines {\"workload\": SPEC, \"weight\": W}: the tasks of one run; weight "
                "(default 1) is how often the workload runs, e.g. in a model");
  t->add_option("--scheduler", tune.scheduler,
                "how several tasks share the trials: gradient (default: where the weighted "
                "latency falls fastest) or round-robin");
  t->add_option("--target", tune.target, "cpu (default)");
  t->add_option("--gpu-math", tune.gpu_math,
                "GPU targets: fp32 (default) or tf32 (the space may use TF32 tensor cores)")
      ->check(CLI::IsMember({"fp32", "tf32"}));
  t->add_option("--trials", tune.trials,
                "candidates to measure in this run, over all tasks (default 300)");
  t->add_option("--max-trials-per-task", tune.max_trials_per_task,
                "with several tasks (--model, --tasks, repeated --workload): the most trials "
                "one task may take; the scheduler spreads the rest (default 0: no cap)");
  t->add_option("--weights", tune.weights,
                "cold: evict each workload's parameters (weights, biases) from every cache "
                "before each timed call, as a large model's are when its step comes round "
                "again; warm (default): leave them where the previous call put them");
  t->add_option("--db", tune.db_path,
                std::string(lathe::tools::kDbHelp) +
                    " (default: $LATHE_DB or ~/.local/share/lathe/tuning.db)")
      ->check(lathe::tools::DatabaseLocationCheck());
  AddRemoteOptions(t, &tune.tuner, &tune.token_file, &tune.tls_ca,
                   "submit a job to a lathed daemon (HOST:PORT) and follow it");
  t->add_flag("--cancel-on-interrupt", tune.cancel_on_interrupt,
              "with --tuner: Ctrl-C cancels the job (default: detach, the job keeps running)");
  t->add_flag("--json", tune.json, "print one JSON object on stdout");
  t->add_option("--plot", tune.plot, "write the tuning curve as an SVG file");
  t->add_option("--batch", tune.batch, "candidates per search round (default 64)");
  t->add_option("--seed", tune.seed, "random seed of the search (default: from the clock)");
  t->add_option("--min-repeat-ms", tune.min_repeat_ms,
                "time each candidate for at least this long (default 100)");
  t->add_flag("--no-baseline", tune.no_baseline, "do not measure the library baseline");
  CLI::Option* remeasure_top = t->add_option(
      "--remeasure-top", tune.remeasure_top,
      "at the end, re-time the best N records for longer (5x --min-repeat-ms) so that a lucky "
      "short measurement cannot stay the best; 0: off (default 5; with --tuner: the daemon's "
      "--remeasure-top)");
  std::string tune_model;
  std::vector<std::string> tune_model_inputs;
  t->add_option("--model", tune_model,
                "tune every task of an ONNX model (weights: how often each runs); --trials is "
                "the model's total budget");
  t->add_option("--input", tune_model_inputs, "with --model: NAME=SHAPE (repeatable)");
  std::string tune_model_layout = "blocked";
  t->add_option("--layout", tune_model_layout,
                "with --model: activation layout: blocked (default), nchw or nchw{b}c");
  lathe::tools::RemoteOptions workers;
  CLI::App* wk = app.add_subcommand("workers", "list a lathed daemon's measurement workers");
  AddRemoteOptions(wk, &workers.tuner, &workers.token_file, &workers.tls_ca,
                   "the daemon (HOST:PORT)");
  wk->get_option("--tuner")->required();
  wk->add_flag("--json", workers.json, "print one JSON object");
  lathe::tools::RemoteOptions jobs;
  CLI::App* jb = app.add_subcommand("jobs", "list a lathed daemon's tuning jobs");
  AddRemoteOptions(jb, &jobs.tuner, &jobs.token_file, &jobs.tls_ca, "the daemon (HOST:PORT)");
  jb->get_option("--tuner")->required();
  jb->add_flag("--json", jobs.json, "print one JSON object");

  lathe::tools::VerifyCliOptions verify;
  CLI::App* v = app.add_subcommand(
      "verify", "prove GPU schedules correct without a GPU (NVRTC, ptxas and the emulator)");
  v->add_option("--target", verify.target, "cuda:sm_XX")->required();
  v->add_option("--workload", verify.workload, "workload spec")->required();
  v->add_option("--schedule", verify.schedule,
                "'default': the untuned schedule (the default); 'rule': the search space's "
                "rule-picked candidate");
  v->add_option("--trace", verify.trace_file, "verify this schedule trace (JSON)");
  v->add_option("--random", verify.random, "verify N candidates of the GPU search space");
  v->add_option("--seed", verify.seed, "seed of --random (default 1)");
  v->add_option("--gpu-math", verify.gpu_math,
                "fp32 (default) or tf32: let the rule and --random use TF32 tensor cores "
                "(outputs compared within the TF32 tolerance)")
      ->check(CLI::IsMember({"fp32", "tf32"}));
  v->add_flag("--json", verify.json, "print one JSON object");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kUsageError;
  }
  if (b->parsed()) {
    if (!build_model.model.empty()) {
      build_model.out = build.out;
      build_model.db_path = build.db_path;
      build_model.default_schedules = build.schedule == "default";
      build_model.target = build.target;
      build_model.gpu_math = build.gpu_math;
      return lathe::tools::RunModelBuild(build_model);
    }
    if (build.workload.empty()) {
      std::fprintf(stderr, "lathe build: --workload or --model is required\n");
      return kUsageError;
    }
    return lathe::tools::RunBuild(build);
  }
  if (int rc = lathe::tools::DispatchModelCommands(model_cmds); rc >= 0) return rc;
  if (q->parsed()) {
    if (!query_remote.tuner.empty()) {
      query_remote.json = query.json;
      return lathe::tools::RunRemoteQuery(query, query_remote);
    }
    return lathe::tools::RunQuery(query);
  }
  if (d->parsed()) return lathe::tools::RunDb(db_sub, db_path, db_file, db_json);
  if (t->parsed()) {
    tune.remeasure_top_given = remeasure_top->count() > 0;
    if (!tune_model.empty()) {
      if (int rc = lathe::tools::PrepareModelTune(tune_model, tune_model_inputs, tune_model_layout,
                                                  &tune);
          rc != 0) {
        return rc;
      }
    }
    if (!tune.tuner.empty() && tune.gpu_math != "fp32") {
      std::fprintf(stderr,
                   "lathe tune: --gpu-math tf32 tunes on this machine only (a lathed job "
                   "tunes fp32)\n");
      return kUsageError;
    }
    if (!tune.tuner.empty()) return lathe::tools::RunRemoteTune(tune);
    return lathe::tools::RunTune(tune);
  }
  if (wk->parsed()) return lathe::tools::RunWorkers(workers);
  if (jb->parsed()) return lathe::tools::RunJobs(jobs);
  if (v->parsed()) return lathe::tools::RunVerify(verify);
  return kUsageError;
}

}  // namespace

// Any exception that escapes a command is an error line and exit status 1, never an abort.
int main(int argc, char** argv) {
  lathe::tools::InstallTerminateHandler("lathe");
  return lathe::tools::RunGuarded("lathe", [&] { return Main(argc, argv); });
}
