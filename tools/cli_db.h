// \file
// The database commands of the `lathe` CLI: `lathe query` and `lathe db
// stats|export|import|verify` (CONTRACT.md "The CLI"). tools/lathe_main.cc parses the flags
// and calls these; they print results on stdout, messages on stderr, and return the exit
// status: 0 success, 2 bad usage, 3 no record (query), 1 any other failure.
#ifndef LATHE_TOOLS_CLI_DB_H_
#define LATHE_TOOLS_CLI_DB_H_

#include <string>

#include "absl/status/statusor.h"

namespace lathe::tools {

// $LATHE_DB when set and non-empty, else ~/.local/share/lathe/tuning.db.
std::string DefaultDbPath();

// The device class a `--target` names: "cpu" is this machine's CPU class; a full device class
// string ("cpu:<model>:<isa>:<N>c", or any class with at least three ':'-separated parts) is
// taken as given, as are a GPU's class "cuda:<name> (sm_XX)" and the emulator's "cuda-emu:sm_XX".
// "cuda", "cuda:N", "cuda:sm_XX" are Unimplemented here (the GPU class comes from device
// discovery); anything else is InvalidArgument.
absl::StatusOr<std::string> ResolveDeviceClass(const std::string& target);

struct QueryOptions {
  std::string workload;        // --workload SPEC (required)
  std::string target = "cpu";  // --target
  std::string db_path;         // --db; empty means DefaultDbPath()
  bool json = false;           // --json
  // Also accept a record of the same CPU model and ISA with another core count (the output
  // says which record was used and why). Off by default: exact device class only.
  bool allow_other_core_count = false;
  // When set, used instead of resolving `target` (e.g. a GPU class found by the caller).
  std::string device_class;
};

// `lathe query`: prints the best record for the workload on the target's device class.
// Exit 3 (saying why) when there is none or the database file does not exist; 2 for a bad
// spec or target; 1 for a database failure. With `json`, stdout holds one object with
// workload, device_class, latency_us, gflops, trace, measured_at (unix ms), remeasured_at
// (unix ms of the last careful re-timing, 0: none), worker,
// candidate_id, cv, repeats, match and explanation (on a miss: found=false and explanation).
int RunQuery(const QueryOptions& options);

// `lathe db SUB [--db PATH] [FILE]`:
//   stats           counts (json: workloads, records, ok_records, device_classes,
//                   by_error_class, schema_version)
//   export [FILE]   JSONL to FILE (written to FILE.tmp, then renamed) or stdout ("" or "-")
//   import FILE     merges a JSONL file ("-": stdin); creates the database and its directory.
//                   Every record is checked first (tools/record_check.h: its workload and key,
//                   and for ok records a trace that replays and lowers for the workload and a
//                   latency the device class can reach); a record that fails, or a line over
//                   16 MiB, is refused: "lathe db import: FILE:LINE: refused record 'ID':
//                   REASON" on stderr, the other records are imported, and the exit status is
//                   1 (json: refused and refusals [{line, candidate_id, reason}]). A malformed
//                   line stops the import there (the records before it are kept), exit 1.
//   verify          full integrity check, and every record checked as import checks it;
//                   exit 1 when problems are found
// An unknown SUB or a missing FILE for import is exit 2; a missing database file is exit 1
// (except for import).
int RunDb(const std::string& sub, const std::string& db_path, const std::string& file, bool json);

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_CLI_DB_H_
