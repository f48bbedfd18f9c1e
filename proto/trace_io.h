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
class Trace;
}

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

}  // namespace lathe::traceio

#endif  // LATHE_PROTO_TRACE_IO_H_
