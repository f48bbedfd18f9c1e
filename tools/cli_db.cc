#include "tools/cli_db.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "codegen/host.h"
#include "db/database.h"
#include "db/jsonl.h"
#include "db/location.h"
#include "db/lookup.h"
#include "ir/target.h"
#include "ir/workload.h"
#include "tools/cli_common.h"
#include "tools/record_check.h"

namespace lathe::tools {
namespace {

using json = nlohmann::json;

// Strings from the database may hold anything; JSON output needs valid UTF-8.
std::string SafeText(const std::string& s) {
  json j = s;
  std::string out = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return json::parse(out).get<std::string>();
}

std::string FormatTime(int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// How many untrusted records `lathe db verify` lists one by one.
constexpr int64_t kMaxListedRecordProblems = 100;

absl::StatusOr<std::unique_ptr<db::Database>> OpenExisting(const std::string& path) {
  db::OpenOptions options;
  options.create_if_missing = false;
  return db::Database::Open(path, options);
}

}  // namespace

std::string DefaultDbPath() {
  const char* env = std::getenv("LATHE_DB");
  if (env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  std::string dir;
  if (home != nullptr && *home != '\0') {
    dir = home;
  } else if (const passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_dir != nullptr) {
    dir = pw->pw_dir;
  } else {
    dir = ".";
  }
  return dir + "/.local/share/lathe/tuning.db";
}

absl::StatusOr<std::string> ResolveDeviceClass(const std::string& target) {
  if (target.empty() || target == "cpu") return codegen::HostDeviceClass();
  if (target.rfind("cpu:", 0) == 0) {
    if (!db::ParseCpuDeviceClass(target).has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("target '", target, "': a cpu device class is cpu:<model>:<isa>:<N>c"));
    }
    return target;
  }
  // A GPU's device class as lathe-worker registers it, "cuda:<name> (sm_XX)", is taken as given.
  if (absl::StatusOr<ir::Target> of = ir::TargetOfDeviceClass(target);
      of.ok() && of->kind == ir::TargetKind::kCuda) {
    return target;
  }
  // The emulated GPU's records are keyed by its target.
  absl::StatusOr<ir::Target> t = ir::ParseTarget(target);
  if (t.ok() && t->emulated()) return target;
  if (t.ok() && t->kind == ir::TargetKind::kCuda) {
    return absl::UnimplementedError(absl::StrCat(
        "target '", target,
        "': the gpu device class is not known to lathe query yet; pass the device class string "
        "printed by lathe tune or lathe-worker as --target"));
  }
  std::vector<std::string> parts = absl::StrSplit(target, ':');
  if (parts.size() >= 3) return target;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown target '", target, "' (expected cpu, cuda, cuda:N or a device class)"));
}

int RunQuery(const QueryOptions& options) {
  const std::string cmd = "lathe query";
  if (options.workload.empty()) return Fail(cmd, "--workload is required", kExitUsage);
  absl::StatusOr<ir::WorkloadSpec> spec = ir::ParseWorkloadSpec(options.workload);
  if (!spec.ok()) return Fail(cmd, std::string(spec.status().message()), kExitUsage);
  db::WorkloadRef workload;
  workload.canonical = spec->ToString();
  workload.key = ir::WorkloadKey(workload.canonical);

  std::string device_class = options.device_class;
  if (device_class.empty()) {
    absl::StatusOr<std::string> dc = ResolveDeviceClass(options.target);
    if (!dc.ok()) {
      return Fail(cmd, std::string(dc.status().message()),
                  absl::IsInvalidArgument(dc.status()) ? kExitUsage : kExitFailure);
    }
    device_class = *dc;
  }
  std::string path = options.db_path.empty() ? DefaultDbPath() : options.db_path;

  auto miss = [&](const std::string& why) {
    if (options.json) {
      json out = {{"found", false},
                  {"workload", workload.canonical},
                  {"device_class", SafeText(device_class)},
                  {"explanation", SafeText(why)}};
      std::printf("%s\n", out.dump().c_str());
    }
    return Fail(cmd, SafeText("no record: " + why), kExitNoRecord);
  };

  std::error_code ec;
  if (!db::IsDatabaseUrl(path) && !std::filesystem::exists(path, ec)) {
    return miss(absl::StrCat("no record for ", workload.canonical, " on ", device_class,
                             ": database ", path, " does not exist"));
  }
  absl::StatusOr<std::unique_ptr<db::Database>> database = OpenExisting(path);
  if (absl::IsNotFound(database.status()) && db::IsDatabaseUrl(path)) {
    // A PostgreSQL database (or its schema) that is not there yet: as a missing file.
    return miss(absl::StrCat("no record for ", workload.canonical, " on ", device_class, ": ",
                             database.status().message()));
  }
  if (!database.ok()) return Fail(cmd, std::string(database.status().message()));
  db::LookupPolicy policy;
  if (options.allow_other_core_count) policy.fallback = db::DeviceFallback::kOtherCoreCount;
  absl::StatusOr<db::LookupResult> found = db::Lookup(**database, workload, device_class, policy);
  if (!found.ok()) return Fail(cmd, std::string(found.status().message()));
  if (!found->record.has_value()) return miss(found->explanation);

  const db::Record& r = *found->record;
  double gflops = r.Gflops();
  if (gflops == 0 && r.median_us > 0) {
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(*spec);
    if (w.ok() && w->flops > 0) gflops = w->flops / (r.median_us * 1e3);
  }
  if (options.json) {
    json trace = json::parse(r.trace_json, nullptr, /*allow_exceptions=*/false);
    if (trace.is_discarded()) trace = SafeText(r.trace_json);
    json out = {{"found", true},
                {"workload", workload.canonical},
                {"workload_key", workload.key},
                {"device_class", SafeText(found->device_class)},
                {"requested_device_class", SafeText(device_class)},
                {"match", std::string(db::MatchKindName(found->match))},
                {"explanation", SafeText(found->explanation)},
                {"latency_us", r.median_us},
                {"gflops", gflops},
                {"cv", r.cv},
                {"repeats", r.repeats_us.size()},
                {"trace", trace},
                {"measured_at", r.measured_at_ms},
                {"remeasured_at", r.remeasured_at_ms},
                {"worker", SafeText(r.worker)},
                {"candidate_id", SafeText(r.candidate_id)},
                {"lathe_version", SafeText(r.lathe_version)}};
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  std::printf("workload      %s\n", workload.canonical.c_str());
  std::printf("device class  %s\n", SafeText(found->device_class).c_str());
  std::printf("latency       %.3f us (median of %zu repeats, cv %.2f%%)\n", r.median_us,
              r.repeats_us.size(), r.cv * 100);
  std::printf("gflops        %.1f\n", gflops);
  std::printf("measured      %s by %s\n", FormatTime(r.measured_at_ms).c_str(),
              SafeText(r.worker).c_str());
  if (r.remeasured_at_ms > 0) {
    std::printf("re-timed      %s\n", FormatTime(r.remeasured_at_ms).c_str());
  }
  std::printf("record        %s\n", SafeText(r.candidate_id).c_str());
  if (found->match != db::MatchKind::kExact) {
    std::printf("note          %s\n", SafeText(found->explanation).c_str());
  }
  std::printf("trace         %s\n", SafeText(r.trace_json).c_str());
  return kExitOk;
}

int RunDb(const std::string& sub, const std::string& db_path, const std::string& file,
          bool json_out) {
  const std::string cmd = "lathe db " + sub;
  std::string path = db_path.empty() ? DefaultDbPath() : db_path;
  if (sub != "stats" && sub != "export" && sub != "import" && sub != "verify") {
    return Fail("lathe db",
                "unknown subcommand '" + sub + "' (expected stats, export, import or verify)",
                kExitUsage);
  }

  if (sub == "import") {
    if (file.empty()) return Fail(cmd, "missing FILE (a JSONL file, or - for stdin)", kExitUsage);
    std::ifstream in_file;
    std::istream* in = &std::cin;
    if (file != "-") {
      in_file.open(file, std::ios::binary);
      if (!in_file) return Fail(cmd, "cannot read " + file);
      in = &in_file;
    }
    absl::StatusOr<db::DatabaseLocation> location = db::ParseDatabaseLocation(path);
    if (!location.ok()) return Fail(cmd, std::string(location.status().message()), kExitUsage);
    std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (location->kind == db::StoreKind::kSqlite && !parent.empty()) {
      std::filesystem::create_directories(parent, ec);
    }
    if (ec) return Fail(cmd, "cannot create directory " + parent.string() + ": " + ec.message());
    db::OpenOptions options;
    options.quick_check = true;  // never merge into a damaged file
    absl::StatusOr<std::unique_ptr<db::Database>> database = db::Database::Open(path, options);
    if (!database.ok()) return Fail(cmd, std::string(database.status().message()));
    const std::string source = file == "-" ? "<stdin>" : file;
    RecordChecker checker;
    db::ImportOptions import_options;
    import_options.check = [&checker](const db::Record& r) { return checker.Check(r); };
    absl::StatusOr<db::ImportStats> stats =
        db::ImportJsonl(**database, *in, source, import_options);
    if (!stats.ok()) return Fail(cmd, std::string(stats.status().message()));
    for (const db::RefusedRecord& r : stats->refusals) {
      std::fprintf(
          stderr, "%s: %s:%lld: refused%s: %s\n", cmd.c_str(), source.c_str(),
          static_cast<long long>(r.line),
          r.candidate_id.empty() ? "" : (" record '" + SafeText(r.candidate_id) + "'").c_str(),
          SafeText(r.reason).c_str());
    }
    if (stats->refused > static_cast<int64_t>(stats->refusals.size())) {
      std::fprintf(stderr, "%s: ... and %lld more refused\n", cmd.c_str(),
                   static_cast<long long>(stats->refused - stats->refusals.size()));
    }
    if (json_out) {
      json out = {{"records", stats->records},
                  {"inserted", stats->inserted},
                  {"duplicates", stats->duplicates},
                  {"refused", stats->refused},
                  {"refusals", json::array()}};
      for (const db::RefusedRecord& r : stats->refusals) {
        out["refusals"].push_back({{"line", r.line},
                                   {"candidate_id", SafeText(r.candidate_id)},
                                   {"reason", SafeText(r.reason)}});
      }
      std::printf("%s\n", out.dump().c_str());
    } else {
      std::printf("imported %lld records into %s: %lld new, %lld already present, %lld refused\n",
                  static_cast<long long>(stats->records), (*database)->path().c_str(),
                  static_cast<long long>(stats->inserted),
                  static_cast<long long>(stats->duplicates),
                  static_cast<long long>(stats->refused));
    }
    if (stats->refused > 0) {
      return Fail(cmd, absl::StrCat(stats->refused, " record(s) of ", source,
                                    " refused (the others were imported)"));
    }
    return kExitOk;
  }

  std::error_code ec;
  if (!db::IsDatabaseUrl(path) && !std::filesystem::exists(path, ec)) {
    return Fail(cmd, "database " + path + ": no such file");
  }
  absl::StatusOr<std::unique_ptr<db::Database>> database = OpenExisting(path);
  if (!database.ok()) return Fail(cmd, std::string(database.status().message()));

  if (sub == "stats") {
    absl::StatusOr<db::Stats> s = (*database)->GetStats();
    if (!s.ok()) return Fail(cmd, std::string(s.status().message()));
    if (json_out) {
      json out = {{"path", (*database)->path()},
                  {"schema_version", s->schema_version},
                  {"workloads", s->workloads},
                  {"device_classes", s->device_classes},
                  {"records", s->records},
                  {"ok_records", s->ok_records},
                  {"by_error_class", s->by_error_class}};
      std::printf("%s\n", out.dump().c_str());
    } else {
      std::printf("database        %s (schema v%lld)\n", (*database)->path().c_str(),
                  static_cast<long long>(s->schema_version));
      std::printf("workloads       %lld\n", static_cast<long long>(s->workloads));
      std::printf("device classes  %lld\n", static_cast<long long>(s->device_classes));
      std::printf("records         %lld\n", static_cast<long long>(s->records));
      std::printf("ok records      %lld\n", static_cast<long long>(s->ok_records));
      for (const auto& [name, n] : s->by_error_class) {
        std::printf("  %-16s %lld\n", name.c_str(), static_cast<long long>(n));
      }
    }
    return kExitOk;
  }

  if (sub == "export") {
    if (file.empty() || file == "-") {
      absl::StatusOr<int64_t> n = db::ExportJsonl(**database, std::cout);
      if (!n.ok()) return Fail(cmd, std::string(n.status().message()));
      std::fprintf(stderr, "exported %lld records\n", static_cast<long long>(*n));
      return kExitOk;
    }
    std::string tmp = file + ".tmp";
    absl::StatusOr<int64_t> n;
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) return Fail(cmd, "cannot write " + tmp);
      n = db::ExportJsonl(**database, out);
      out.close();
      if (n.ok() && !out) n = absl::DataLossError("write " + tmp + " failed");
    }
    if (!n.ok()) {
      std::filesystem::remove(tmp, ec);
      return Fail(cmd, std::string(n.status().message()));
    }
    std::filesystem::rename(tmp, file, ec);
    if (ec) return Fail(cmd, "cannot rename " + tmp + " to " + file + ": " + ec.message());
    if (json_out) {
      std::printf("%s\n", json({{"records", *n}, {"file", file}}).dump().c_str());
    } else {
      std::printf("exported %lld records to %s\n", static_cast<long long>(*n), file.c_str());
    }
    return kExitOk;
  }

  // verify: the file's integrity, then every record as an import would check it.
  absl::StatusOr<std::vector<std::string>> problems = (*database)->IntegrityCheck();
  if (!problems.ok()) return Fail(cmd, std::string(problems.status().message()));
  RecordChecker checker;
  int64_t untrusted = 0;
  absl::Status walked = (*database)->ForEachRecord([&](const db::Record& r) -> absl::Status {
    absl::Status st = checker.Check(r);
    if (st.ok()) return absl::OkStatus();
    if (++untrusted <= kMaxListedRecordProblems) {
      problems->push_back(absl::StrCat("record '", r.candidate_id, "' (", r.workload, " on ",
                                       r.device_class, "): ", st.message()));
    }
    return absl::OkStatus();
  });
  if (!walked.ok()) return Fail(cmd, std::string(walked.message()));
  if (untrusted > kMaxListedRecordProblems) {
    problems->push_back(
        absl::StrCat("... and ", untrusted - kMaxListedRecordProblems, " more records like these"));
  }
  absl::StatusOr<int> version = (*database)->SchemaVersion();
  if (json_out) {
    json out = {
        {"path", (*database)->path()}, {"ok", problems->empty()}, {"problems", json::array()}};
    for (const std::string& p : *problems) out["problems"].push_back(SafeText(p));
    if (version.ok()) out["schema_version"] = *version;
    std::printf("%s\n", out.dump().c_str());
  } else if (problems->empty()) {
    std::printf("database %s: ok (schema v%d)\n", (*database)->path().c_str(),
                version.ok() ? *version : 0);
  } else {
    for (const std::string& p : *problems) std::printf("%s\n", SafeText(p).c_str());
  }
  if (!problems->empty()) {
    return Fail(cmd, "database " + path + ": integrity check found " +
                         std::to_string(problems->size()) + " problem(s)");
  }
  return kExitOk;
}

}  // namespace lathe::tools
