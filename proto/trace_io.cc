#include "proto/trace_io.h"

#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lathe/v1/measure.pb.h"
#include "lathe/v1/trace.pb.h"

namespace lathe::traceio {

void TraceToProto(const ir::Trace& trace, lathe::v1::Trace* out) {
  out->Clear();
  out->set_version(trace.version);
  out->set_workload(trace.workload);
  out->set_target(trace.target);
  out->set_sketch(trace.sketch + 1);  // 0 on the wire means "none"
  for (int64_t d : trace.decisions) out->add_decisions(d);
  for (const ir::Instruction& inst : trace.instructions) {
    lathe::v1::Instruction* m = out->add_instructions();
    m->set_kind(inst.kind);
    m->set_stage(inst.stage);
    for (const std::string& l : inst.loops) m->add_loops(l);
    for (int64_t f : inst.factors) m->add_factors(f);
    m->set_target(inst.target);
    m->set_target_loop(inst.target_loop);
    m->set_tag(inst.tag);
  }
}

absl::StatusOr<ir::Trace> TraceFromProto(const lathe::v1::Trace& msg) {
  if (msg.version() == 0) return absl::InvalidArgumentError("trace has no version");
  if (msg.version() > ir::kTraceVersion) {
    return absl::InvalidArgumentError(absl::StrCat("trace version ", msg.version(),
                                                   " is newer than this lathe supports (",
                                                   ir::kTraceVersion, "); upgrade lathe"));
  }
  ir::Trace t;
  t.version = msg.version();
  t.workload = msg.workload();
  t.target = msg.target().empty() ? "cpu" : msg.target();
  t.sketch = msg.sketch() - 1;
  t.decisions.assign(msg.decisions().begin(), msg.decisions().end());
  for (const auto& m : msg.instructions()) {
    ir::Instruction inst;
    inst.kind = m.kind();
    inst.stage = m.stage();
    inst.loops.assign(m.loops().begin(), m.loops().end());
    inst.factors.assign(m.factors().begin(), m.factors().end());
    inst.target = m.target();
    inst.target_loop = m.target_loop();
    inst.tag = m.tag();
    t.instructions.push_back(std::move(inst));
  }
  return t;
}

namespace {

std::string MessageToJson(const lathe::v1::Trace& msg, bool pretty) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = pretty;
  opts.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(msg, &out, opts);
  return out;
}

absl::Status MessageFromJson(const std::string& json, lathe::v1::Trace* msg) {
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto st = google::protobuf::util::JsonStringToMessage(json, msg, opts);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed trace json: ", std::string(st.message())));
  }
  return absl::OkStatus();
}

}  // namespace

std::string TraceToJson(const ir::Trace& trace, bool pretty) {
  lathe::v1::Trace msg;
  TraceToProto(trace, &msg);
  return MessageToJson(msg, pretty);
}

absl::StatusOr<ir::Trace> TraceFromJson(const std::string& json) {
  lathe::v1::Trace msg;
  if (absl::Status st = MessageFromJson(json, &msg); !st.ok()) return st;
  return TraceFromProto(msg);
}

ir::ProgramId ProgramIdOfTraceJson(const std::string& trace_json) {
  absl::StatusOr<ir::Trace> t = TraceFromJson(trace_json);
  if (t.ok()) return ir::ProgramIdOf(*t);
  return ir::ProgramIdOfUnreadableTrace(trace_json);
}

namespace {

// The request's serialized trace message, its workload filled in from the request.
absl::Status RequestMessage(const lathe::v1::MeasureRequest& request, lathe::v1::Trace* msg) {
  if (!msg->ParseFromString(request.trace())) {
    return absl::InvalidArgumentError("malformed trace: not a serialized lathe.v1.Trace");
  }
  if (msg->workload().empty()) msg->set_workload(request.workload());
  return absl::OkStatus();
}

void SetRequestMessage(lathe::v1::Trace& msg, lathe::v1::MeasureRequest* request) {
  if (msg.workload() == request->workload()) msg.clear_workload();
  request->clear_trace_json();
  (void)msg.SerializeToString(request->mutable_trace());
}

}  // namespace

bool HasTraceMessage(const lathe::v1::MeasureRequest& request) { return !request.trace().empty(); }

absl::StatusOr<ir::Trace> RequestTrace(const lathe::v1::MeasureRequest& request) {
  if (!HasTraceMessage(request)) return TraceFromJson(request.trace_json());
  lathe::v1::Trace msg;
  if (absl::Status st = RequestMessage(request, &msg); !st.ok()) return st;
  return TraceFromProto(msg);
}

void SetRequestTrace(const ir::Trace& trace, lathe::v1::MeasureRequest* request) {
  lathe::v1::Trace msg;
  TraceToProto(trace, &msg);
  SetRequestMessage(msg, request);
}

void SetRequestTraceJson(const std::string& trace_json, lathe::v1::MeasureRequest* request) {
  lathe::v1::Trace msg;
  if (!MessageFromJson(trace_json, &msg).ok()) {
    request->clear_trace();
    request->set_trace_json(trace_json);
    return;
  }
  SetRequestMessage(msg, request);
}

std::string RequestTraceJson(const lathe::v1::MeasureRequest& request) {
  if (!HasTraceMessage(request)) return request.trace_json();
  lathe::v1::Trace msg;
  if (!RequestMessage(request, &msg).ok()) return request.trace();  // kept as it came
  return MessageToJson(msg, false);
}

ir::ProgramId RequestProgramId(const lathe::v1::MeasureRequest& request) {
  absl::StatusOr<ir::Trace> t = RequestTrace(request);
  if (t.ok()) return ir::ProgramIdOf(*t);
  return ir::ProgramIdOfUnreadableTrace(RequestTraceJson(request));
}

bool SameRequestTrace(const lathe::v1::MeasureRequest& a, const lathe::v1::MeasureRequest& b) {
  return a.trace() == b.trace() && a.trace_json() == b.trace_json();
}

absl::StatusOr<ir::Trace> ReadTraceFile(const std::string& path, std::string* json) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read trace file " + path);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<ir::Trace> trace = TraceFromJson(text.str());
  if (!trace.ok()) {
    return absl::Status(trace.status().code(), absl::StrCat(path, ": ", trace.status().message()));
  }
  if (json != nullptr) *json = text.str();
  return trace;
}

}  // namespace lathe::traceio
