// \file
// JSONL export and import of tuning records: a portable, versioned line format for moving
// records between databases (`lathe db export|import`).
//
// Format (version 1): the first line is a header
//   {"format":"lathe-records","version":1,...}
// and every further line is one record: an object with the fields of db::Record
// ("candidate_id", "workload", "workload_key", "device_class", "trace", "repeats_us",
// "median_us", "cv", "flops", "error_class", "error_msg", "worker", "lathe_version",
// "measured_at", "inserted_at", "remeasured_at"), keys sorted. A text field that is valid UTF-8 is
// a JSON string; any other byte string is written as {"base64":"..."} so every byte round-trips.
// Readers ignore unknown keys (additions do not bump the version); a file whose version is
// newer than kJsonlVersion is refused.
#ifndef LATHE_DB_JSONL_H_
#define LATHE_DB_JSONL_H_

#include <cstdint>
#include <functional>
#include <istream>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "db/database.h"
#include "db/record.h"

namespace lathe::db {

inline constexpr int kJsonlVersion = 1;

// Writes the header and every record, in insertion order. Returns the number of records.
// Fails with the stream's or the database's error; `out` may then hold a partial file.
absl::StatusOr<int64_t> ExportJsonl(Database& db, std::ostream& out);

// The longest line an import reads (16 MiB; records lathe writes are a few KiB): a longer line
// is refused as it streams past, never held in memory whole.
inline constexpr int64_t kMaxJsonlLineBytes = int64_t{16} << 20;

// A record that an import refused, and why.
struct RefusedRecord {
  int64_t line = 0;
  std::string candidate_id;  // empty when the line was too long to read
  std::string reason;
};

struct ImportStats {
  int64_t records = 0;     // record lines read (refused ones included)
  int64_t inserted = 0;    // new records
  int64_t duplicates = 0;  // candidate ids already present (skipped)
  int64_t refused = 0;     // lines refused (over-long, or failing the check)
  // The first kMaxListedRefusals refusals, in file order.
  std::vector<RefusedRecord> refusals;
};
inline constexpr size_t kMaxListedRefusals = 100;

struct ImportOptions {
  // Called for every record before it is imported; a non-OK status refuses it (the record is
  // skipped and listed with the status's message; the rest of the file still imports). The db
  // library knows nothing of traces or devices: the caller (tools/record_check.h) supplies
  // the check that replays traces and bounds latencies. Unset: every record is imported.
  std::function<absl::Status(const Record&)> check;
  int64_t max_line_bytes = kMaxJsonlLineBytes;
};

// Merges the records of a JSONL stream into `db`: records whose candidate id is present are
// skipped, so importing the same file twice changes nothing. `source` names the stream in
// messages ("FILE:LINE: ..."). Refuses a missing or foreign header and a newer version
// (FailedPrecondition) before writing anything; a malformed line is InvalidArgument naming the
// line. Records are committed in batches; on a bad line the records before it are kept
// (importing again is safe). A line longer than `options.max_line_bytes`, or a record that
// `options.check` refuses, is skipped and counted in `refused` (a file from elsewhere may hold
// a few bad records among good ones; the caller decides what the refusals mean).
absl::StatusOr<ImportStats> ImportJsonl(Database& db, std::istream& in, const std::string& source,
                                        const ImportOptions& options = {});

// One record as a JSON line (no trailing newline), and back.
std::string RecordToJsonLine(const Record& record);
absl::StatusOr<Record> RecordFromJsonLine(std::string_view line);

}  // namespace lathe::db

#endif  // LATHE_DB_JSONL_H_
