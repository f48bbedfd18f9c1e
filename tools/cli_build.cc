#include "tools/cli_build.h"

#include <cctype>
#include <cstdio>
#include <fstream>

#include "absl/strings/numbers.h"
#include "codegen/cpu_kernel.h"
#include "codegen/host.h"
#include "codegen/lower.h"
#include "db/database.h"
#include "db/location.h"
#include "db/lookup.h"
#include "fmt/format.h"
#include "ir/printer.h"
#include "ir/schedule.h"
#include "ir/target.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "proto/trace_io.h"
#include "tools/cli_db.h"
#include "tools/model_schedules.h"

#ifdef LATHE_HAVE_CUDA_BACKEND
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/gpu_schedule.h"
#endif

namespace lathe::tools {

namespace {

int Fail(int code, const std::string& msg) {
  fmt::print(stderr, "lathe build: {}\n", msg);
  return code;
}

bool ValidSymbol(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

int RunBuild(const BuildOptions& o) {
  auto w = ir::MakeWorkload(o.workload);
  if (!w.ok()) return Fail(2, std::string(w.status().message()));
  if (!o.trace_file.empty() && !o.schedule.empty()) {
    return Fail(2, "--trace and --schedule are mutually exclusive");
  }
  // rule:N, the N-th (from 1) rule-picked candidate.
  int rule_index = -1;
  if (o.schedule == "rule") rule_index = 0;
  if (o.schedule.rfind("rule:", 0) == 0) {
    int n = 0;
    if (!absl::SimpleAtoi(o.schedule.substr(5), &n) || n < 1) {
      return Fail(2, "--schedule '" + o.schedule + "': rule:N needs N >= 1");
    }
    rule_index = n - 1;
  }
  if (!o.schedule.empty() && o.schedule != "default" && rule_index < 0) {
    return Fail(2, "unknown --schedule '" + o.schedule + "' (expected default, rule or rule:N)");
  }
  if (o.emit != "so" && o.emit != "obj" && o.emit != "llvm" && o.emit != "lowered" &&
      o.emit != "trace" && o.emit != "cuda" && o.emit != "ptx") {
    return Fail(
        2, "unknown --emit '" + o.emit + "' (expected so, obj, llvm, lowered, trace, cuda or ptx)");
  }
  absl::StatusOr<ir::Target> target = ir::ParseTarget(o.target);
  const bool cuda = target.ok() && target->kind == ir::TargetKind::kCuda;
  if (!cuda && o.target != "cpu") {
    return Fail(2,
                "unknown --target '" + o.target + "' (expected cpu, cuda, cuda:N or cuda:sm_XX)");
  }
  bool gpu_emit = o.emit == "cuda" || o.emit == "ptx";
  if (cuda && !gpu_emit && o.emit != "trace") {
    return Fail(2, "--target " + o.target + " builds --emit cuda, ptx or trace, not " + o.emit);
  }
  if (o.gpu_math != "fp32" && o.gpu_math != "tf32") {
    return Fail(2, "unknown --gpu-math '" + o.gpu_math + "' (expected fp32 or tf32)");
  }
  if (o.gpu_math == "tf32" && (!cuda || rule_index < 0)) {
    return Fail(2,
                "--gpu-math tf32 picks the GPU rule's kernels: it needs a cuda target and "
                "--schedule rule or rule:N");
  }
  if (!cuda && gpu_emit) return Fail(2, "--emit " + o.emit + " needs a cuda target");
  std::string arch;
  if (cuda) {
#ifdef LATHE_HAVE_CUDA_BACKEND
    if (target->arch.empty()) {
      return Fail(2, "target '" + o.target + "' names no cuda architecture (expected cuda:sm_XX)");
    }
    arch = target->arch;
    if (o.trace_file.empty() && o.schedule.empty()) {
      return Fail(2,
                  "a cuda build needs --schedule default or --trace FILE (the database holds "
                  "no gpu records yet)");
    }
#else
    return Fail(1, "this build has no cuda backend (configure with -DLATHE_BUILD_CUDA=ON)");
#endif
  }
  std::string name = o.name.empty() ? "lathe_" + w->spec.op + "_" + w->key : o.name;
  if (!ValidSymbol(name)) return Fail(2, "--name '" + name + "' is not a valid C identifier");

  ir::Trace trace;
  trace.workload = w->canonical;
  if (!o.trace_file.empty()) {
    auto t = traceio::ReadTraceFile(o.trace_file);
    if (!t.ok()) return Fail(1, std::string(t.status().message()));
    trace = *t;
  } else if (o.schedule.empty()) {
    std::string path = o.db_path.empty() ? DefaultDbPath() : o.db_path;
    db::OpenOptions oo;
    oo.create_if_missing = false;
    auto dbh = db::Database::Open(path, oo);
    if (absl::IsNotFound(dbh.status())) {
      return Fail(3, "no tuning database at " + db::RedactDatabaseLocation(path) +
                         "; tune the workload first, or pass --schedule default or --trace FILE");
    }
    if (!dbh.ok()) return Fail(1, std::string(dbh.status().message()));
    std::string device = codegen::HostDeviceClass();
    auto r = db::Lookup(**dbh, {w->canonical, w->key}, device);
    if (!r.ok()) return Fail(1, std::string(r.status().message()));
    if (!r->record) {
      return Fail(3, "no tuning record for " + w->canonical + " on " + device + " in " + path +
                         " (" + r->explanation + "); tune it first, or pass --schedule default");
    }
    auto t = traceio::TraceFromJson(r->record->trace_json);
    if (!t.ok()) return Fail(1, "stored trace is unreadable: " + std::string(t.status().message()));
    trace = *t;
    fmt::print(stderr, "lathe build: using the best record ({:.1f} us, measured by {})\n",
               r->record->median_us, r->record->worker);
  }
  absl::StatusOr<ir::Schedule> sch = ir::ApplyTrace(*w, trace);
#ifdef LATHE_HAVE_CUDA_BACKEND
  if (cuda && o.schedule == "default") sch = codegen::cuda::DefaultGpuSchedule(*w);
#endif
  // The search space's rule-picked first candidate for the target (what an untuned model
  // step gets): to read or time it without a database.
  if (rule_index >= 0) sch = RuleSchedule(*w, *target, o.gpu_math == "tf32", rule_index);
  if (!sch.ok()) return Fail(1, "invalid schedule: " + std::string(sch.status().message()));
  if (o.emit == "trace") {
    // The schedule as a trace file (for --trace, bench_built_kernel --trace, or editing).
    ir::Trace t = sch->trace();
    t.workload = w->canonical;
    std::ofstream out(o.out, std::ios::trunc);
    out << traceio::TraceToJson(t, /*pretty=*/true) << "\n";
    if (!out) return Fail(1, "cannot write " + o.out);
    fmt::print("{}: the {} schedule's trace for {}\n", o.out,
               o.schedule.empty() ? "record" : o.schedule, w->canonical);
    return 0;
  }
#ifdef LATHE_HAVE_CUDA_BACKEND
  if (cuda) {
    auto text = o.emit == "cuda" ? codegen::cuda::BuildCudaText(*sch, name)
                                 : codegen::cuda::BuildPtx(*sch, name, arch);
    if (!text.ok()) return Fail(1, "invalid schedule: " + std::string(text.status().message()));
    std::ofstream out(o.out, std::ios::trunc | std::ios::binary);
    out << *text;
    if (!out) return Fail(1, "cannot write " + o.out);
    fmt::print("{}: {} ({}, {}) for {}\n", o.out, name, o.emit, arch, w->canonical);
    return 0;
  }
#endif
  auto f = codegen::Lower(*sch, name);
  if (!f.ok()) return Fail(1, "invalid schedule: " + std::string(f.status().message()));
  absl::Status st;
  if (o.emit == "so") {
    st = codegen::WriteSharedLibrary({*f}, o.out);
  } else if (o.emit == "obj") {
    st = codegen::WriteObjectFile({*f}, o.out);
  } else if (o.emit == "lowered") {
    std::ofstream out(o.out, std::ios::trunc);
    out << ir::ToText(*f);
    if (!out) st = absl::UnavailableError("cannot write " + o.out);
  } else {
    auto text = codegen::EmitLlvmIr({*f});
    if (!text.ok()) return Fail(1, std::string(text.status().message()));
    std::ofstream out(o.out, std::ios::trunc);
    out << *text;
    if (!out) st = absl::UnavailableError("cannot write " + o.out);
  }
  if (!st.ok()) return Fail(1, std::string(st.message()));
  fmt::print("{}: {} ({}) for {}\n", o.out, name, o.emit, w->canonical);
  return 0;
}

}  // namespace lathe::tools
