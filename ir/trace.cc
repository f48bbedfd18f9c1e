#include "ir/trace.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lathe/v1/trace.pb.h"

namespace lathe::ir {

void TraceToProto(const Trace& trace, lathe::v1::Trace* out) {
  out->Clear();
  out->set_version(trace.version);
  out->set_workload(trace.workload);
  out->set_target(trace.target);
  out->set_sketch(trace.sketch + 1);  // 0 on the wire means "none"
  for (int64_t d : trace.decisions) out->add_decisions(d);
  for (const Instruction& inst : trace.instructions) {
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

absl::StatusOr<Trace> TraceFromProto(const lathe::v1::Trace& msg) {
  if (msg.version() == 0) return absl::InvalidArgumentError("trace has no version");
  if (msg.version() > kTraceVersion) {
    return absl::InvalidArgumentError(absl::StrCat("trace version ", msg.version(),
                                                   " is newer than this lathe supports (",
                                                   kTraceVersion, "); upgrade lathe"));
  }
  Trace t;
  t.version = msg.version();
  t.workload = msg.workload();
  t.target = msg.target().empty() ? "cpu" : msg.target();
  t.sketch = msg.sketch() - 1;
  t.decisions.assign(msg.decisions().begin(), msg.decisions().end());
  for (const auto& m : msg.instructions()) {
    Instruction inst;
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

std::string TraceToJson(const Trace& trace, bool pretty) {
  lathe::v1::Trace msg;
  TraceToProto(trace, &msg);
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = pretty;
  opts.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(msg, &out, opts);
  return out;
}

absl::StatusOr<Trace> TraceFromJson(const std::string& json) {
  lathe::v1::Trace msg;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto st = google::protobuf::util::JsonStringToMessage(json, &msg, opts);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed trace json: ", std::string(st.message())));
  }
  return TraceFromProto(msg);
}

std::string TraceToText(const Trace& trace) {
  std::string out;
  for (const Instruction& i : trace.instructions) {
    out += i.kind + "(" + i.stage;
    if (!i.loops.empty()) out += ", [" + absl::StrJoin(i.loops, ", ") + "]";
    if (!i.factors.empty()) out += ", {" + absl::StrJoin(i.factors, ", ") + "}";
    if (!i.target.empty()) out += ", " + i.target;
    if (!i.target_loop.empty()) out += "." + i.target_loop;
    if (!i.tag.empty()) out += ", \"" + i.tag + "\"";
    out += ")\n";
  }
  return out;
}

}  // namespace lathe::ir
