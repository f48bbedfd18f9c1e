// Fuzz target: a trace in its JSON form, as trace files (`lathe build --trace`), records and
// workers give it. Parsed; then, when it parses, written back (which must read back to the
// same trace), replayed on its workload and lowered for its target, as `lathe db import`
// checks a record's trace (tools/record_check.cc).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "codegen/lower.h"
#include "ir/schedule.h"
#include "ir/target.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "proto/trace_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  (void)lathe::traceio::ProgramIdOfTraceJson(json);
  absl::StatusOr<lathe::ir::Trace> trace = lathe::traceio::TraceFromJson(json);
  if (!trace.ok()) return 0;
  absl::StatusOr<lathe::ir::Trace> again =
      lathe::traceio::TraceFromJson(lathe::traceio::TraceToJson(*trace));
  if (!again.ok() || !(*again == *trace)) {
    std::fprintf(
        stderr, "a parsed trace does not read back from its own JSON: %s\n",
        again.ok() ? lathe::ir::TraceToText(*again).c_str() : again.status().ToString().c_str());
    std::abort();
  }
  (void)lathe::ir::TraceToText(*trace);
  absl::StatusOr<lathe::ir::Target> target = lathe::ir::ParseTarget(trace->target);
  if (!target.ok()) return 0;
  absl::StatusOr<lathe::ir::Workload> w = lathe::ir::MakeWorkload(trace->workload);
  if (!w.ok()) return 0;
  absl::StatusOr<lathe::ir::Schedule> sch = lathe::ir::ApplyTrace(*w, *trace);
  if (!sch.ok()) return 0;
  (void)lathe::codegen::Lower(*sch, "fuzz", lathe::codegen::LowerOptions::ForTarget(target->kind));
  return 0;
}
