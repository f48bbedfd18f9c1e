#include "ir/trace.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lathe::ir {

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

ProgramId ProgramIdOfUnreadableTrace(const std::string& text) {
  Fnv128 h;
  h.Str("unreadable trace");
  h.Str(text);
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
