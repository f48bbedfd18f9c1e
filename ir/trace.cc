#include "ir/trace.h"

#include <google/protobuf/util/json_util.h>

#include <cstdio>

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

namespace {

// FNV-1a over 128 bits (offset basis and prime of the FNV specification).
class Fnv128 {
 public:
  void Bytes(const void* p, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= b[i];
      h_ *= kPrime;
    }
  }
  // Length-prefixed, so that field boundaries are part of the hash.
  void Str(const std::string& s) {
    Int(static_cast<int64_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  void Int(int64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i)
      b[i] = static_cast<unsigned char>(static_cast<uint64_t>(v) >> (8 * i));
    Bytes(b, 8);
  }
  ProgramId Id() const {
    return ProgramId{static_cast<uint64_t>(h_ >> 64), static_cast<uint64_t>(h_)};
  }

 private:
  static constexpr unsigned __int128 kPrime =
      (static_cast<unsigned __int128>(1) << 88) + (1 << 8) + 0x3b;
  unsigned __int128 h_ =
      (static_cast<unsigned __int128>(0x6c62272e07bb0142ULL) << 64) | 0x62b821756295c58dULL;
};

}  // namespace

std::string ProgramId::Hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

ProgramId ProgramIdOf(const Trace& trace) {
  Fnv128 h;
  h.Str(trace.workload);
  h.Str(trace.target);
  h.Int(static_cast<int64_t>(trace.instructions.size()));
  for (const Instruction& in : trace.instructions) {
    h.Str(in.kind);
    h.Str(in.stage);
    h.Int(static_cast<int64_t>(in.loops.size()));
    for (const std::string& l : in.loops) h.Str(l);
    h.Int(static_cast<int64_t>(in.factors.size()));
    for (int64_t f : in.factors) h.Int(f);
    h.Str(in.target);
    h.Str(in.target_loop);
    h.Str(in.tag);
  }
  return h.Id();
}

ProgramId ProgramIdOfTraceJson(const std::string& trace_json) {
  absl::StatusOr<Trace> t = TraceFromJson(trace_json);
  if (t.ok()) return ProgramIdOf(*t);
  Fnv128 h;
  h.Str("unreadable trace");
  h.Str(trace_json);
  return h.Id();
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
