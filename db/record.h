// \file
// What the tuning database stores: one measurement record per candidate (a schedule trace
// measured for a workload on a device class), its error class, and summary types returned by
// queries. Plain data; no SQLite here.
#ifndef LATHE_DB_RECORD_H_
#define LATHE_DB_RECORD_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace lathe::db {

// The outcome of measuring one candidate (DESIGN.md "Measurement is isolated").
enum class ErrorClass {
  kOk,
  kInvalidSchedule,
  kCompileError,
  kRuntimeError,
  kTimeout,
  kWrongAnswer,
};

inline constexpr ErrorClass kAllErrorClasses[] = {
    ErrorClass::kOk,           ErrorClass::kInvalidSchedule, ErrorClass::kCompileError,
    ErrorClass::kRuntimeError, ErrorClass::kTimeout,         ErrorClass::kWrongAnswer};

// "ok", "invalid_schedule", "compile_error", "runtime_error", "timeout", "wrong_answer".
std::string_view ErrorClassName(ErrorClass error_class);
// Inverse of ErrorClassName; InvalidArgument naming the text for anything else.
absl::StatusOr<ErrorClass> ParseErrorClass(std::string_view name);

// A workload as the database keys it: the canonical spec (ir::WorkloadSpec::ToString()) and
// its stable key (ir::WorkloadKey of the canonical spec).
struct WorkloadRef {
  std::string canonical;
  std::string key;
};

// One measurement. Every text field is stored byte-exact (NUL bytes and invalid UTF-8
// included). The trace is opaque to the database: its JSON text, stored as given.
struct Record {
  int64_t id = 0;                  // assigned by the database; 0 before insertion
  std::string candidate_id;        // unique per record; re-inserting it returns the existing row
  std::string workload;            // canonical spec
  std::string workload_key;        // key of `workload`
  std::string device_class;        // e.g. "cpu:<model>:avx512:2c"
  std::string trace_json;          // the schedule trace, JSON text
  std::vector<double> repeats_us;  // every timed repeat, microseconds
  double median_us = 0;            // the figure; 0 for failed candidates without timings
  double cv = 0;                   // coefficient of variation of repeats_us (stddev / mean)
  double flops = 0;                // floating-point operations of one call; 0 when unknown
  ErrorClass error_class = ErrorClass::kOk;
  std::string error_msg;
  std::string worker;          // who measured it
  std::string lathe_version;   // version of the lathe that measured it
  int64_t measured_at_ms = 0;  // unix milliseconds, set by the measurer
  int64_t inserted_at_ms = 0;  // unix milliseconds, set by the database
  // Unix milliseconds of the last careful re-measurement whose repeats were added
  // (Database::AddRepeats); 0 when the record holds only its first measurement.
  int64_t remeasured_at_ms = 0;

  // GFLOP/s at the median latency; 0 when flops or median_us is not positive.
  double Gflops() const;
  bool operator==(const Record&) const = default;
};

// Median of `values` (mean of the middle two for an even count); 0 for an empty span.
double Median(std::span<const double> values);
// Sample standard deviation over the mean; 0 for fewer than two values or a zero mean.
double CoefficientOfVariation(std::span<const double> values);

// Database-wide counts (`lathe db stats`).
struct Stats {
  int64_t workloads = 0;
  int64_t device_classes = 0;
  int64_t records = 0;
  int64_t ok_records = 0;
  std::map<std::string, int64_t> by_error_class;  // error class name -> records
  int64_t schema_version = 0;
};

// One measurement in a workload's history (Database::Timeline): what a tuning curve needs.
struct TimelinePoint {
  int64_t measured_at_ms = 0;
  double median_us = 0;  // 0 for failed candidates without timings
  ErrorClass error_class = ErrorClass::kOk;
  double flops = 0;
};

// The result of inserting one record.
struct InsertResult {
  int64_t id = 0;         // row id of the record
  bool inserted = false;  // false when the candidate id was already present
};

}  // namespace lathe::db

#endif  // LATHE_DB_RECORD_H_
