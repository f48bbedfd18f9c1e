#include "tools/cli_model.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "codegen/host.h"
#include "db/database.h"
#include "fmt/format.h"
#include "ir/target.h"
#include "model/compile.h"
#include "model/executor.h"
#include "model/library.h"
#include "model/onnx_import.h"
#include "model/plan.h"
#include "model/tasks.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"
#include "tools/cli_db.h"
#include "tools/db_option.h"
#include "tools/model_schedules.h"

#ifdef LATHE_HAVE_CUDA_BACKEND
#include "tools/cli_gpu_model.h"
#endif

namespace lathe::tools {
namespace {

// The model compiler's options for an activation layout choice (every model command).
model::CompileOptions CompileOptionsOf(const LayoutChoice& c) {
  model::CompileOptions co;
  co.block_lanes = c.block_lanes;
  co.datapath_lanes = std::max(1, codegen::HostCpu().datapath_bits / 32);
  co.weight_panel = c.weight_panel;
  co.winograd = c.winograd;
  co.fuse_separable = c.separable;
  co.separable_min_rows = std::max<int64_t>(16, 8 * codegen::HostCpu().cores);
  return co;
}

// The model compiler's options for `target` and `layout`: the layout's on the CPU; plain NCHW
// on a GPU target (model::CompileOptions' defaults, as gpumodel/gpu_model.h compiles: the
// blocked layout, Winograd and packed matmul panels are the CPU's vector layouts).
absl::StatusOr<model::CompileOptions> ModelCompileOptions(const std::string& target,
                                                          const std::string& layout) {
  absl::StatusOr<ir::Target> t = ir::ParseTarget(target);
  if (!t.ok()) return t.status();
  if (t->is_gpu()) return model::CompileOptions();
  absl::StatusOr<LayoutChoice> lc = ParseLayoutOption(layout);
  if (!lc.ok()) return lc.status();
  return CompileOptionsOf(*lc);
}

// Imports and compiles the model; on failure prints the message and sets *code (2 for
// model errors, 1 for internal ones).
std::optional<model::Program> LoadProgram(const std::string& cmd, const ModelCliOptions& o,
                                          int* code) {
  if (o.model.empty()) {
    *code = Fail(cmd, "--model is required", kExitUsage);
    return std::nullopt;
  }
  absl::StatusOr<std::vector<model::InputShape>> shapes = model::ParseInputShapes(o.inputs);
  if (!shapes.ok()) {
    *code = Fail(cmd, std::string(shapes.status().message()), kExitUsage);
    return std::nullopt;
  }
  absl::StatusOr<model::Graph> g = model::ImportOnnx(o.model, *shapes);
  if (!g.ok()) {
    *code = Fail(cmd, std::string(g.status().message()),
                 absl::IsInvalidArgument(g.status()) ? kExitUsage : kExitFailure);
    return std::nullopt;
  }
  absl::StatusOr<model::CompileOptions> options = ModelCompileOptions(o.target, o.layout);
  if (!options.ok()) {
    *code = Fail(cmd, std::string(options.status().message()), kExitUsage);
    return std::nullopt;
  }
  absl::StatusOr<model::Program> p = model::CompileGraph(*std::move(g), *options);
  if (!p.ok()) {
    *code = Fail(cmd, o.model + ": " + std::string(p.status().message()),
                 absl::IsInvalidArgument(p.status()) ? kExitUsage : kExitFailure);
    return std::nullopt;
  }
  return *std::move(p);
}

std::string Shape(const std::vector<int64_t>& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
  return out;
}

}  // namespace

absl::StatusOr<LayoutChoice> ParseLayoutOption(const std::string& layout_text) {
  LayoutChoice c;
  const int host_lanes = std::max(1, codegen::HostCpu().vector_bits / 32);
  c.weight_panel = 2 * host_lanes;
  // Blocked layouts may turn the passes that need them off: blocked:no-winograd,no-separable.
  const size_t colon = layout_text.find(':');
  const std::string layout = layout_text.substr(0, colon);
  bool winograd = true;
  if (colon != std::string::npos) {
    for (absl::string_view m : absl::StrSplit(layout_text.substr(colon + 1), ',')) {
      if (m == "no-winograd") {
        winograd = false;
      } else if (m == "no-separable") {
        c.separable = false;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "--layout '", layout_text, "': unknown modifier '", m,
            "' (blocked layouts take no-winograd and no-separable, e.g. blocked:no-separable)"));
      }
    }
  }
  if (layout == "nchw") {
    if (colon != std::string::npos) {
      return absl::InvalidArgumentError("--layout nchw takes no modifiers");
    }
    return c;
  }
  if (layout == "blocked") {
    c.block_lanes = host_lanes;
    c.winograd = winograd;
    return c;
  }
  int64_t b = 0;
  if (layout.size() > 5 && layout.rfind("nchw", 0) == 0 && layout.back() == 'c' &&
      absl::SimpleAtoi(layout.substr(4, layout.size() - 5), &b) && b >= 2 && b <= 64 &&
      (b & (b - 1)) == 0) {
    c.block_lanes = b;
    c.winograd = winograd;
    return c;
  }
  return absl::InvalidArgumentError("--layout '" + layout_text +
                                    "' must be blocked, nchw or nchw{b}c with b a power of two "
                                    "from 2 to 64 (e.g. nchw8c), a blocked one optionally with "
                                    ":no-winograd and/or :no-separable");
}

int RunModelTasks(const ModelCliOptions& o) {
  int code = 0;
  std::optional<model::Program> p = LoadProgram("lathe model tasks", o, &code);
  if (!p) return code;
  std::vector<model::Task> tasks = model::ExtractTasks(*p);
  const double total = model::ModelFlops(tasks);
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["kernels"] = p->kernels.size();
    j["flops"] = total;
    j["tasks"] = nlohmann::json::array();
    for (const model::Task& t : tasks) {
      j["tasks"].push_back({{"workload", t.workload},
                            {"weight", t.weight},
                            {"flops", t.flops},
                            {"flop_share", t.flop_share},
                            {"nodes", t.nodes}});
    }
    fmt::print("{}\n", j.dump());
    return 0;
  }
  fmt::print("{}: {} kernels, {} tasks, {:.1f} MFLOP\n", o.model, p->kernels.size(), tasks.size(),
             total / 1e6);
  std::vector<const model::Task*> order;
  for (const model::Task& t : tasks) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const model::Task* a, const model::Task* b) {
    return a->flop_share > b->flop_share;
  });
  fmt::print("{:>7} {:>6}  {}\n", "share", "weight", "workload");
  for (const model::Task* t : order) {
    fmt::print("{:>6.2f}% {:>6}  {}\n", 100 * t->flop_share, t->weight, t->workload);
  }
  return 0;
}

namespace {

// Reads `--feed NAME=FILE` data for the plan's inputs; deterministic random data elsewhere.
bool MakeInputs(const std::string& cmd, const ModelCliOptions& o, const model::Plan& plan,
                std::vector<std::vector<float>>* inputs, int* code) {
  std::map<std::string, std::string> feeds;
  for (const std::string& f : o.feeds) {
    const size_t eq = f.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == f.size()) {
      *code = Fail(cmd, "--feed '" + f + "' must be NAME=FILE", kExitUsage);
      return false;
    }
    feeds[f.substr(0, eq)] = f.substr(eq + 1);
  }
  std::mt19937 rng(20261123);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const model::IoInfo& in : plan.inputs) {
    int64_t n = 1;
    for (int64_t d : in.shape) n *= d;
    std::vector<float> data(n);
    auto it = feeds.find(in.name);
    if (it == feeds.end()) {
      for (float& v : data) v = dist(rng);
    } else {
      std::ifstream file(it->second, std::ios::binary | std::ios::ate);
      if (!file) {
        *code = Fail(cmd, "cannot read --feed file " + it->second, kExitUsage);
        return false;
      }
      const int64_t bytes = file.tellg();
      if (bytes != n * 4) {
        *code = Fail(cmd,
                     fmt::format("--feed {}: {} holds {} bytes; input '{}' of shape {} needs {}",
                                 in.name, it->second, bytes, in.name, Shape(in.shape), n * 4),
                     kExitUsage);
        return false;
      }
      file.seekg(0);
      file.read(reinterpret_cast<char*>(data.data()), bytes);
      feeds.erase(it);
    }
    inputs->push_back(std::move(data));
  }
  if (!feeds.empty()) {
    *code = Fail(cmd, "--feed names '" + feeds.begin()->first + "', which is not a model input",
                 kExitUsage);
    return false;
  }
  return true;
}

// The kernels whose record the current rules were never raced against (kUnraced).
int UnracedCount(const std::vector<std::string>& origins) {
  return static_cast<int>(std::count_if(origins.begin(), origins.end(), [](const std::string& o) {
    return absl::EndsWith(o, kUnraced);
  }));
}

// "12 from records, 30 default" for the kernels' schedule origins ("12 from records (3 not
// raced against the current rules), ..." where it applies).
std::string OriginSummary(const std::vector<std::string>& origins, int* from_records) {
  int rec = 0;
  for (const std::string& o : origins) rec += model::RecordUsOf(o) >= 0;
  if (from_records) *from_records = rec;
  const int unraced = UnracedCount(origins);
  return fmt::format(
      "{} from tuning records{}, {} default", rec,
      unraced == 0 ? "" : fmt::format(" ({} not raced against the current rules)", unraced),
      static_cast<int>(origins.size()) - rec);
}

// The advice for records the current rules were never raced against, or "".
std::string UnracedAdvice(const std::vector<std::string>& origins) {
  const int unraced = UnracedCount(origins);
  if (unraced == 0) return "";
  return fmt::format(
      "note: {} kernel{} take{} a record the current rules were never measured against (it "
      "may predate a faster rule): `lathe tune --model` on the same database measures the "
      "rules first and keeps the faster\n",
      unraced, unraced == 1 ? "" : "s", unraced == 1 ? "s" : "");
}

// Runs a compiled model as `lathe run` does (one warm-up, --repeat timed runs, --profile,
// --dump) and prints the report. M is model::CompiledModel or, with the CUDA backend,
// gpumodel::GpuModel: plan(), origins(), Run and RunProfiled. `device`: the GPU's
// description (empty on the CPU).
template <typename M>
int RunAndReport(const std::string& cmd, const ModelCliOptions& o, const M& m,
                 std::vector<std::vector<float>>& inputs, double compile_s,
                 const std::string& device) {
  const model::Plan& pl = m.plan();
  std::vector<std::vector<float>> outputs;
  for (const model::IoInfo& out : pl.outputs) {
    int64_t n = 1;
    for (int64_t d : out.shape) n *= d;
    outputs.push_back(std::vector<float>(n));
  }
  std::vector<const float*> in_ptrs;
  std::vector<float*> out_ptrs;
  for (auto& v : inputs) in_ptrs.push_back(v.data());
  for (auto& v : outputs) out_ptrs.push_back(v.data());
  if (absl::Status s = m.Run(in_ptrs.data(), out_ptrs.data()); !s.ok()) {
    return Fail(cmd, std::string(s.message()));
  }
  std::vector<double> times;
  for (int r = 0; r < o.repeat; ++r) {
    const auto a = std::chrono::steady_clock::now();
    if (absl::Status s = m.Run(in_ptrs.data(), out_ptrs.data()); !s.ok()) {
      return Fail(cmd, std::string(s.message()));
    }
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(times.begin(), times.end());
  const double median_ms = 1e3 * times[times.size() / 2];
  // Where the time goes: each step timed within whole runs, over the same number of runs.
  // The median of each step's times (one outlier on a busy host must not lead the list),
  // scaled back to a sum over the repeats.
  std::vector<double> step_s;
  if (o.profile) {
    std::vector<std::vector<double>> runs;
    for (int r = 0; r < o.repeat; ++r) {
      std::vector<double> one;
      if (absl::Status s = m.RunProfiled(in_ptrs.data(), out_ptrs.data(), &one); !s.ok()) {
        return Fail(cmd, std::string(s.message()));
      }
      runs.push_back(std::move(one));
    }
    step_s.assign(runs[0].size(), 0.0);
    for (size_t i = 0; i < step_s.size(); ++i) {
      std::vector<double> t;
      for (const auto& run : runs) t.push_back(run[i]);
      std::sort(t.begin(), t.end());
      step_s[i] = t[t.size() / 2] * o.repeat;
    }
  }
  std::vector<std::string> files;
  if (!o.dump_dir.empty()) {
    ::mkdir(o.dump_dir.c_str(), 0755);
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string f = o.dump_dir + "/" + std::to_string(i) + ".bin";
      std::ofstream out(f, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(outputs[i].data()),
                static_cast<std::streamsize>(outputs[i].size() * 4));
      if (!out) return Fail(cmd, "cannot write " + f);
      files.push_back(f);
    }
  }
  int from_records = 0;
  const std::string origins = OriginSummary(m.origins(), &from_records);
  // Steps by time, for --profile.
  std::vector<size_t> order;
  double step_total = 0;
  for (size_t i = 0; i < step_s.size(); ++i) {
    order.push_back(i);
    step_total += step_s[i];
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return step_s[a] > step_s[b]; });
  // What the tuner's objective says the run should take: the steps' records added up (each
  // timed alone, warm), for the steps that have one.
  double records_us = 0;
  int without_record = 0;
  for (const model::PlanStep& st : pl.steps) {
    const double us = model::RecordUsOf(m.origins()[st.kernel]);
    if (us < 0) {
      ++without_record;
    } else {
      records_us += us;
    }
  }
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["latency_ms"] = median_ms;
    j["target"] = o.target;
    if (!device.empty()) j["device"] = device;
    j["repeat"] = o.repeat;
    j["compile_s"] = compile_s;
    j["kernels"] = pl.kernels.size();
    j["steps"] = pl.steps.size();
    j["kernels_from_records"] = from_records;
    j["kernels_rules_not_raced"] = UnracedCount(m.origins());
    j["arena_bytes"] = pl.arena_bytes;
    j["outputs"] = nlohmann::json::array();
    for (size_t i = 0; i < pl.outputs.size(); ++i) {
      nlohmann::json out = {{"name", pl.outputs[i].name}, {"shape", pl.outputs[i].shape}};
      if (!files.empty()) out["file"] = files[i];
      j["outputs"].push_back(out);
    }
    if (o.profile) {
      j["profile_steps_ms"] = 1e3 * step_total / o.repeat;
      j["records_ms"] = records_us / 1e3;
      j["steps_without_record"] = without_record;
      j["profile"] = nlohmann::json::array();
      for (size_t i : order) {
        const model::PlanStep& st = pl.steps[i];
        j["profile"].push_back({{"step", i},
                                {"workload", pl.kernels[st.kernel]},
                                {"origin", m.origins()[st.kernel]},
                                {"nodes", st.nodes},
                                {"ms", 1e3 * step_s[i] / o.repeat},
                                {"share", step_total > 0 ? step_s[i] / step_total : 0}});
      }
    }
    fmt::print("{}\n", j.dump());
    return 0;
  }
  fmt::print(
      "{}: {:.3f} ms (median of {} runs); {} kernels in {} steps ({}), compiled in {:.1f} s\n",
      o.model, median_ms, o.repeat, pl.kernels.size(), pl.steps.size(), origins, compile_s);
  if (!device.empty()) fmt::print("  on {}\n", device);
  fmt::print("{}", UnracedAdvice(m.origins()));
  for (size_t i = 0; i < pl.outputs.size(); ++i) {
    fmt::print("  output {} '{}' {}{}\n", i, pl.outputs[i].name, Shape(pl.outputs[i].shape),
               files.empty() ? "" : " -> " + files[i]);
  }
  if (o.profile) {
    // Each step is timed inside whole runs, so the steps add up to the run: a gap between the
    // two is time spent between the steps (or a noisy host).
    fmt::print(
        "where the time goes (each step timed within the run, median of {} runs; the steps "
        "add up to {:.3f} ms of the {:.3f} ms run):\n",
        o.repeat, 1e3 * step_total / o.repeat, median_ms);
    if (without_record < static_cast<int>(pl.steps.size())) {
      fmt::print("the records of {} steps add up to {:.3f} ms (the tuner's objective){}\n",
                 pl.steps.size() - without_record, records_us / 1e3,
                 without_record == 0
                     ? ""
                     : fmt::format("; {} steps run default schedules", without_record));
    }
    for (size_t r = 0; r < order.size() && r < 15; ++r) {
      const model::PlanStep& st = pl.steps[order[r]];
      fmt::print("  {:6.3f} ms {:5.1f}%  {}  [{}]  {}\n", 1e3 * step_s[order[r]] / o.repeat,
                 100 * step_s[order[r]] / step_total, pl.kernels[st.kernel], m.origins()[st.kernel],
                 st.nodes.empty() ? "" : st.nodes.front());
    }
  }
  return 0;
}

}  // namespace

int RunModelRun(const ModelCliOptions& o) {
  const std::string cmd = "lathe run";
  absl::StatusOr<ir::Target> target = ir::ParseTarget(o.target);
  if (!target.ok()) return Fail(cmd, std::string(target.status().message()), kExitUsage);
  if (o.gpu_math != "fp32" && !target->is_gpu()) {
    return Fail(cmd, "--gpu-math " + o.gpu_math + " applies to GPU targets only", kExitUsage);
  }
#ifndef LATHE_HAVE_CUDA_BACKEND
  if (target->is_gpu()) {
    return Fail(cmd, "--target " + o.target +
                         ": this build has no CUDA backend (configure with -DLATHE_BUILD_CUDA=ON)");
  }
#endif
  int code = 0;
  std::optional<model::Program> p = LoadProgram(cmd, o, &code);
  if (!p) return code;
  if (o.repeat < 1) return Fail(cmd, "--repeat must be at least 1", kExitUsage);
  absl::StatusOr<model::Plan> plan = model::MakePlan(*p);
  if (!plan.ok()) return Fail(cmd, std::string(plan.status().message()));
  std::vector<std::vector<float>> inputs;
  if (!MakeInputs(cmd, o, *plan, &inputs, &code)) return code;
  std::unique_ptr<db::Database> db;
  if (!o.default_schedules) {
    if (absl::Status s = OpenModelDatabase(o.db_path, &db); !s.ok()) {
      return Fail(cmd, std::string(s.message()));
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
#ifdef LATHE_HAVE_CUDA_BACKEND
  if (target->is_gpu()) {
    absl::StatusOr<std::unique_ptr<gpumodel::GpuModel>> m = CreateGpuModel(
        *std::move(plan), *target, db.get(), o.default_schedules, o.gpu_math == "tf32");
    if (!m.ok()) {
      return Fail(cmd, std::string(m.status().message()),
                  absl::IsInvalidArgument(m.status()) ? kExitUsage : kExitFailure);
    }
    return RunAndReport(cmd, o, **m, inputs, seconds(), (*m)->device().description());
  }
#endif
  std::unique_ptr<model::ScheduleSource> schedules = ModelSchedules(db.get());
  absl::StatusOr<std::unique_ptr<model::CompiledModel>> m =
      model::CompiledModel::Create(*std::move(plan), *schedules);
  if (!m.ok()) return Fail(cmd, std::string(m.status().message()));
  return RunAndReport(cmd, o, **m, inputs, seconds(), "");
}

int RunModelBuild(const ModelCliOptions& o) {
  const std::string cmd = "lathe build";
  // A model library is host code; GPU models are compiled and run in-process (lathe run).
  if (o.target != "cpu") {
    return Fail(cmd,
                "--model builds a CPU library only (--target cpu); run a model on a GPU with "
                "`lathe run --model F --target " +
                    o.target + "`",
                kExitUsage);
  }
  int code = 0;
  std::optional<model::Program> p = LoadProgram(cmd, o, &code);
  if (!p) return code;
  if (o.out.empty()) return Fail(cmd, "--out is required", kExitUsage);
  absl::StatusOr<model::Plan> plan = model::MakePlan(*p);
  if (!plan.ok()) return Fail(cmd, std::string(plan.status().message()));
  std::unique_ptr<db::Database> db;
  if (!o.default_schedules) {
    if (absl::Status s = OpenModelDatabase(o.db_path, &db); !s.ok()) {
      return Fail(cmd, std::string(s.message()));
    }
  }
  std::unique_ptr<model::ScheduleSource> schedules = ModelSchedules(db.get());
  std::vector<std::string> origins;
  if (absl::Status s = model::BuildModelLibrary(*plan, *schedules, o.out, &origins); !s.ok()) {
    return Fail(cmd, std::string(s.message()));
  }
  fmt::print(
      "{}: {} kernels in {} steps ({}), {:.1f} MB of weights, {:.1f} MB arena; exports "
      "lathe_model_run, lathe_model_io\n",
      o.out, plan->kernels.size(), plan->steps.size(), OriginSummary(origins, nullptr),
      plan->weights.size() / 1e6, plan->arena_bytes / 1e6);
  fmt::print("{}", UnracedAdvice(origins));
  return 0;
}

const char kLayoutHelp[] =
    "activation layout: blocked (default: nchw{b}c between convolutions, b from the vector "
    "lanes), nchw, or nchw{b}c (blocks of at most b channels); a blocked one may add "
    ":no-winograd (3x3 convolutions direct) and/or no-separable (a depthwise convolution and "
    "the 1x1 reading it as two kernels), e.g. blocked:no-separable";

void AddModelCommands(CLI::App& app, ModelCommands* c) {
  c->model = app.add_subcommand("model", "inspect an ONNX model");
  c->model->require_subcommand(1);
  c->model_tasks = c->model->add_subcommand(
      "tasks", "the tunable tasks of a model: workload, weight, FLOP share, nodes");
  c->model_tasks->add_option("--model", c->tasks.model, "ONNX model file")->required();
  c->model_tasks->add_option("--input", c->tasks.inputs,
                             "NAME=SHAPE of an input with dynamic dimensions (repeatable)");
  c->model_tasks->add_flag("--json", c->tasks.json, "print one JSON object");
  c->model_tasks->add_option("--layout", c->tasks.layout, kLayoutHelp);
  c->model_tasks->add_option("--target", c->tasks.target,
                             "cpu (default), or a GPU target (cuda, cuda:N, cuda:sm_XX, "
                             "cuda-emu:sm_XX): the tasks its kernels run (plain NCHW)");

  c->run_cmd = app.add_subcommand("run", "compile a model in-process and run it");
  c->run_cmd->add_option("--model", c->run.model, "ONNX model file")->required();
  c->run_cmd->add_option("--input", c->run.inputs, "NAME=SHAPE (repeatable)");
  c->run_cmd
      ->add_option("--db", c->run.db_path,
                   std::string(kDbHelp) + " (default: $LATHE_DB or ~/.local/share/lathe/tuning.db)")
      ->check(DatabaseLocationCheck());
  c->run_cmd->add_option("--feed", c->run.feeds,
                         "NAME=FILE: raw little-endian float32 data of an input (repeatable; "
                         "default: deterministic random)");
  c->run_cmd->add_option("--dump", c->run.dump_dir, "write output i as DIR/i.bin (raw float32)");
  c->run_cmd->add_option("--repeat", c->run.repeat, "timed runs (default 10); the median is shown");
  c->run_cmd->add_flag("--json", c->run.json, "print one JSON object");
  c->run_cmd->add_option("--layout", c->run.layout, kLayoutHelp);
  c->run_cmd->add_flag("--default-schedules", c->run.default_schedules,
                       "use every kernel's default schedule (ignore the database)");
  c->run_cmd->add_flag("--profile", c->run.profile,
                       "also time every step alone and show where the time goes");
  c->run_cmd
      ->add_option("--gpu-math", c->run.gpu_math,
                   "GPU targets: fp32 (default) or tf32 (contractions may use TF32 tensor "
                   "cores, as cuBLAS's TF32 mode)")
      ->check(CLI::IsMember({"fp32", "tf32"}));
  c->run_cmd->add_option("--target", c->run.target,
                         "cpu (default), cuda (GPU 0), cuda:N, or cuda-emu:sm_XX (the GPU "
                         "emulator); GPU targets run plain NCHW (--layout is the CPU's)");
}

int DispatchModelCommands(const ModelCommands& c) {
  if (c.model_tasks && c.model_tasks->parsed()) return RunModelTasks(c.tasks);
  if (c.run_cmd && c.run_cmd->parsed()) return RunModelRun(c.run);
  return -1;
}

absl::StatusOr<std::vector<tuner::TuneTask>> ModelTuneTasks(const std::string& model,
                                                            const std::vector<std::string>& inputs,
                                                            const std::string& layout,
                                                            const std::string& target) {
  absl::StatusOr<model::CompileOptions> options = ModelCompileOptions(target, layout);
  if (!options.ok()) return options.status();
  absl::StatusOr<std::vector<model::InputShape>> shapes = model::ParseInputShapes(inputs);
  if (!shapes.ok()) return shapes.status();
  absl::StatusOr<model::Graph> g = model::ImportOnnx(model, *shapes);
  if (!g.ok()) return g.status();
  absl::StatusOr<model::Program> p = model::CompileGraph(*std::move(g), *options);
  if (!p.ok())
    return absl::Status(p.status().code(), model + ": " + std::string(p.status().message()));
  std::vector<tuner::TuneTask> tasks;
  for (const model::Task& t : model::ExtractTasks(*p)) {
    tasks.push_back(tuner::TuneTask{t.workload, static_cast<double>(t.weight)});
  }
  return tasks;
}

int PrepareModelTune(const std::string& model, const std::vector<std::string>& inputs,
                     const std::string& layout, TuneCliOptions* tune) {
  const std::string cmd = "lathe tune";
  if (!tune->workloads.empty() || !tune->tasks_file.empty()) {
    return Fail(cmd, "--model excludes --workload and --tasks", kExitUsage);
  }
  absl::StatusOr<std::vector<tuner::TuneTask>> tasks =
      ModelTuneTasks(model, inputs, layout, tune->target);
  if (!tasks.ok()) return Fail(cmd, std::string(tasks.status().message()), kExitUsage);
  if (tasks->empty()) return Fail(cmd, model + " holds no task to tune", kExitUsage);
  tune->model_tasks = *std::move(tasks);
  fmt::print(stderr, "lathe tune: {} tasks of {}\n", tune->model_tasks.size(), model);
  return 0;
}

}  // namespace lathe::tools
