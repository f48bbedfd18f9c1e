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
#include <istream>
#include <ostream>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "db/database.h"
#include "db/record.h"

namespace lathe::db {

inline constexpr int kJsonlVersion = 1;

// Writes the header and every record, in insertion order. Returns the number of records.
// Fails with the stream's or the database's error; `out` may then hold a partial file.
absl::StatusOr<int64_t> ExportJsonl(Database& db, std::ostream& out);

struct ImportStats {
  int64_t records = 0;     // record lines read
  int64_t inserted = 0;    // new records
  int64_t duplicates = 0;  // candidate ids already present (skipped)
};

// Merges the records of a JSONL stream into `db`: records whose candidate id is present are
// skipped, so importing the same file twice changes nothing. `source` names the stream in
// messages ("FILE:LINE: ..."). Refuses a missing or foreign header and a newer version
// (FailedPrecondition) before writing anything; a malformed line is InvalidArgument naming the
// line. Records are committed in batches; on a bad line the records before it are kept
// (importing again is safe).
absl::StatusOr<ImportStats> ImportJsonl(Database& db, std::istream& in, const std::string& source);

// One record as a JSON line (no trailing newline), and back.
std::string RecordToJsonLine(const Record& record);
absl::StatusOr<Record> RecordFromJsonLine(std::string_view line);

}  // namespace lathe::db

#endif  // LATHE_DB_JSONL_H_
