// \file
// The checks a tuning record from elsewhere must pass before lathe trusts it (`lathe db
// import` refuses records that fail them, `lathe db verify` reports those already stored):
// its workload parses and its key is that workload's, its trace replays and lowers for that
// workload, and its latency implies no more FLOP/s than its device class can do. They live
// in tools/ because they need ir, codegen and the trace bridge, which db/ must not see; db/
// takes them as a callback (db::ImportOptions::check).
#ifndef LATHE_TOOLS_RECORD_CHECK_H_
#define LATHE_TOOLS_RECORD_CHECK_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "db/record.h"

namespace lathe::tools {

// A generous upper bound of the float32 GFLOP/s of a device class, from its string alone:
// for "cpu:<model>:<isa>:<N>c", vector lanes of the ISA (16 for avx512, 8 for avx/avx2, 4
// for sse4.2, neon and scalar, 16 for an ISA lathe does not know) x 2 FMA units x 2 flops x N
// cores x 5 GHz; for a GPU ("cuda:<name> (sm_XX)", "cuda-emu:sm_XX") 200 SMs x 128 lanes x 2
// flops x 4 GHz (about 205 TFLOP/s, above any GPU's CUDA-core float32 rate). nullopt for a
// string that is no device class.
std::optional<double> PeakGflopsBound(const std::string& device_class);

// Checks records, remembering which (workload, trace) pairs already lowered so that a file
// or database holding many records of one program lowers it once. Not thread-safe.
class RecordChecker {
 public:
  // OK, or InvalidArgument saying why the record cannot be trusted. Failed records (any
  // error class but ok) are only checked for a parsable workload: their traces may be
  // invalid by nature, and they are never a best record.
  absl::Status Check(const db::Record& record);

 private:
  absl::Status CheckTrace(const db::Record& record, const std::string& canonical);

  std::map<std::pair<std::string, std::string>, absl::Status> traces_;
};

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_RECORD_CHECK_H_
