// \file
// The compiler-facing lookup: the best record for a workload on a device class, or an
// explained miss. When the exact device class has no record, a policy says whether a record
// of a compatible class may be used (today: the same CPU model and vector ISA with another
// core count); the result always says which record was used and why. Nothing falls back
// silently.
#ifndef LATHE_DB_LOOKUP_H_
#define LATHE_DB_LOOKUP_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "db/database.h"
#include "db/record.h"

namespace lathe::db {

enum class DeviceFallback {
  kExactOnly,       // only records of the requested device class
  kOtherCoreCount,  // else a CPU class with the same model and ISA and the nearest core count
};

struct LookupPolicy {
  DeviceFallback fallback = DeviceFallback::kExactOnly;
};

enum class MatchKind {
  kMiss,            // no usable record
  kExact,           // the requested device class
  kOtherCoreCount,  // a compatible CPU class with another core count (policy allowed it)
};
std::string_view MatchKindName(MatchKind kind);  // "miss", "exact", "other_core_count"

struct LookupResult {
  std::optional<Record> record;  // set unless match == kMiss
  MatchKind match = MatchKind::kMiss;
  std::string device_class;  // the class whose record was used; the requested one on a miss
  // Always set: which record was used and why, or why there is none (other device classes
  // holding records are named, with why they were not used).
  std::string explanation;
};

// Looks up the best record. A miss is not an error (match == kMiss, record empty); errors are
// database failures. A workload key stored with a different canonical spec is a miss that says
// so, never a hit.
absl::StatusOr<LookupResult> Lookup(Database& db, const WorkloadRef& workload,
                                    const std::string& device_class,
                                    const LookupPolicy& policy = {});

// The parts of a CPU device class "cpu:<model>:<isa>:<N>c" (see codegen/host.h); the model
// may itself contain ':'. nullopt for anything else (GPU classes, malformed strings).
struct CpuDeviceClass {
  std::string model;
  std::string isa;
  int cores = 0;
};
std::optional<CpuDeviceClass> ParseCpuDeviceClass(std::string_view device_class);

}  // namespace lathe::db

#endif  // LATHE_DB_LOOKUP_H_
