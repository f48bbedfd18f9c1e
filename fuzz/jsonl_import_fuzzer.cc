// Fuzz target: a JSONL tuning log as `lathe db import` reads it: merged into a fresh SQLite
// database with every record checked first (tools/record_check.h: workload, trace replay and
// lowering, latency bound), then exported again.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "db/database.h"
#include "db/jsonl.h"
#include "fuzz/scratch.h"
#include "tools/record_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lathe::fuzz::ScratchDir() + "/import.db";
  lathe::fuzz::RemoveDatabase(path);
  {
    absl::StatusOr<std::unique_ptr<lathe::db::Database>> db = lathe::db::Database::Open(path);
    if (!db.ok()) {
      std::fprintf(stderr, "cannot open the scratch database: %s\n",
                   db.status().ToString().c_str());
      std::abort();
    }
    std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
    lathe::tools::RecordChecker checker;
    lathe::db::ImportOptions options;
    options.check = [&checker](const lathe::db::Record& r) { return checker.Check(r); };
    options.max_line_bytes = 1 << 20;  // the limit's path without 16 MiB inputs
    absl::StatusOr<lathe::db::ImportStats> stats =
        lathe::db::ImportJsonl(**db, in, "fuzz.jsonl", options);
    if (stats.ok() && stats->inserted > 0) {
      std::ostringstream out;
      (void)lathe::db::ExportJsonl(**db, out);
    }
  }
  lathe::fuzz::RemoveDatabase(path);
  return 0;
}
