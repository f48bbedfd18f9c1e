// \file
// The bridge between ir's plain-data traces and their wire and storage schema, the
// `lathe.v1.Trace` protobuf message and its JSON form (what trace files and the database hold).
// It lives above ir/ so that ir depends on nothing of ours (DESIGN.md, layering).
#ifndef LATHE_PROTO_TRACE_IO_H_
#define LATHE_PROTO_TRACE_IO_H_

#include <string>

#include "absl/status/statusor.h"
#include "ir/trace.h"

namespace lathe::v1 {
class MeasureRequest;
class Trace;
}  // namespace lathe::v1

namespace lathe::traceio {

void TraceToProto(const ir::Trace& trace, lathe::v1::Trace* out);
// InvalidArgument for a message with no version or a version newer than ir::kTraceVersion.
absl::StatusOr<ir::Trace> TraceFromProto(const lathe::v1::Trace& msg);

// The JSON form (protobuf JSON mapping, compact unless `pretty`). Parsing rejects malformed
// JSON, unknown fields, and versions newer than ir::kTraceVersion with InvalidArgument.
std::string TraceToJson(const ir::Trace& trace, bool pretty = false);
absl::StatusOr<ir::Trace> TraceFromJson(const std::string& json);
// A trace file (its JSON form), as `lathe build --trace` reads it: NotFound "cannot read trace
// file PATH" when it cannot be opened, TraceFromJson's error prefixed with "PATH: " otherwise.
// `json`, when given, receives the file's text.
absl::StatusOr<ir::Trace> ReadTraceFile(const std::string& path, std::string* json = nullptr);

// The program of a stored trace (JSON); for text that is not a readable trace, the hash of
// the text itself (ir::ProgramIdOfUnreadableTrace), so that it still identifies what was stored.
ir::ProgramId ProgramIdOfTraceJson(const std::string& trace_json);

// A MeasureRequest's schedule. A request names its workload once (`workload`) and carries the
// trace as a serialized lathe.v1.Trace whose own workload is empty (`trace`); stored records
// and older senders give the trace's JSON form instead (`trace_json`, its workload inside).
// These read and write either form.
//
// Whether the request carries the serialized message (else `trace_json`).
bool HasTraceMessage(const lathe::v1::MeasureRequest& request);
// The request's trace: `trace` when set (its workload taken from the request), else
// `trace_json`. Fails as TraceFromProto / TraceFromJson do.
absl::StatusOr<ir::Trace> RequestTrace(const lathe::v1::MeasureRequest& request);
// Sets the message form from `trace` and clears `trace_json`. Call it after the request's
// `workload` is set: a trace of that workload leaves the message's own empty.
void SetRequestTrace(const ir::Trace& trace, lathe::v1::MeasureRequest* request);
// Sets the message form from a stored trace's JSON (as SetRequestTrace, after `workload`);
// text that does not parse as a trace is kept as `trace_json`, for the measurer to report as
// the invalid schedule it is.
void SetRequestTraceJson(const std::string& trace_json, lathe::v1::MeasureRequest* request);
// The request's trace in its stored form (the JSON that TraceToJson gives, workload inside);
// `trace_json` as it came when the request carries that form.
std::string RequestTraceJson(const lathe::v1::MeasureRequest& request);
// The program of the request's trace, as ProgramIdOfTraceJson(RequestTraceJson(request)).
ir::ProgramId RequestProgramId(const lathe::v1::MeasureRequest& request);
// Whether two requests carry the same trace (in the same form).
bool SameRequestTrace(const lathe::v1::MeasureRequest& a, const lathe::v1::MeasureRequest& b);

}  // namespace lathe::traceio

#endif  // LATHE_PROTO_TRACE_IO_H_
