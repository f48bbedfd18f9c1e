#include "db/jsonl.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "db/sqlite.h"

namespace lathe::db {
namespace {

using json = nlohmann::json;

constexpr char kFormat[] = "lathe-records";
constexpr int kImportBatch = 1000;

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      unsigned char cc = s[i + k];
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

json EncodeText(const std::string& s) {
  if (ValidUtf8(s)) return s;
  return json{{"base64", absl::Base64Escape(s)}};
}

// Throws nlohmann's exceptions on a type mismatch; the caller converts them.
std::string DecodeText(const json& j, const char* field) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.size() == 1 && j.contains("base64") && j["base64"].is_string()) {
    std::string out;
    if (!absl::Base64Unescape(j["base64"].get<std::string>(), &out)) {
      throw std::invalid_argument(absl::StrCat("field '", field, "': bad base64"));
    }
    return out;
  }
  throw std::invalid_argument(
      absl::StrCat("field '", field, "': expected a string or {\"base64\": ...}"));
}

const json& Field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end()) throw std::invalid_argument(absl::StrCat("missing field '", name, "'"));
  return *it;
}

std::string TextField(const json& obj, const char* name, bool required = true) {
  auto it = obj.find(name);
  if (it == obj.end()) {
    if (required) throw std::invalid_argument(absl::StrCat("missing field '", name, "'"));
    return std::string();
  }
  return DecodeText(*it, name);
}

double NumberField(const json& obj, const char* name, double def) {
  auto it = obj.find(name);
  if (it == obj.end()) return def;
  if (!it->is_number()) {
    throw std::invalid_argument(absl::StrCat("field '", name, "': expected a number"));
  }
  return it->get<double>();
}

int64_t IntField(const json& obj, const char* name, int64_t def) {
  auto it = obj.find(name);
  if (it == obj.end()) return def;
  if (!it->is_number_integer()) {
    throw std::invalid_argument(absl::StrCat("field '", name, "': expected an integer"));
  }
  return it->get<int64_t>();
}

// Reads one line (without its '\n') into *line. A line longer than `max` bytes is read to its
// end but not kept: *line is then empty and *too_long true. False at the end of the stream.
bool ReadBoundedLine(std::istream& in, int64_t max, std::string* line, bool* too_long) {
  line->clear();
  *too_long = false;
  std::streambuf* buf = in.rdbuf();
  if (buf == nullptr) {
    in.setstate(std::ios::badbit);
    return false;
  }
  bool any = false;
  for (;;) {
    const int c = buf->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(any ? std::ios::eofbit : std::ios::eofbit | std::ios::failbit);
      return any;
    }
    any = true;
    if (c == '\n') return true;
    if (*too_long) continue;
    if (static_cast<int64_t>(line->size()) >= max) {
      *too_long = true;
      std::string().swap(*line);  // give the memory back
      continue;
    }
    line->push_back(static_cast<char>(c));
  }
}

}  // namespace

std::string RecordToJsonLine(const Record& r) {
  json j;
  j["candidate_id"] = EncodeText(r.candidate_id);
  j["workload"] = EncodeText(r.workload);
  j["workload_key"] = EncodeText(r.workload_key);
  j["device_class"] = EncodeText(r.device_class);
  j["trace"] = EncodeText(r.trace_json);
  j["repeats_us"] = r.repeats_us;
  j["median_us"] = r.median_us;
  j["cv"] = r.cv;
  j["flops"] = r.flops;
  j["error_class"] = std::string(ErrorClassName(r.error_class));
  j["error_msg"] = EncodeText(r.error_msg);
  j["worker"] = EncodeText(r.worker);
  j["lathe_version"] = EncodeText(r.lathe_version);
  j["measured_at"] = r.measured_at_ms;
  j["inserted_at"] = r.inserted_at_ms;
  j["remeasured_at"] = r.remeasured_at_ms;
  // Every string is valid UTF-8 by construction, so dump() cannot throw.
  return j.dump();
}

absl::StatusOr<Record> RecordFromJsonLine(std::string_view line) {
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("malformed json");
  if (!j.is_object()) return absl::InvalidArgumentError("expected a json object");
  try {
    Record r;
    r.candidate_id = TextField(j, "candidate_id");
    r.workload = TextField(j, "workload");
    r.workload_key = TextField(j, "workload_key");
    r.device_class = TextField(j, "device_class");
    r.trace_json = TextField(j, "trace");
    const json& repeats = Field(j, "repeats_us");
    if (!repeats.is_array()) throw std::invalid_argument("field 'repeats_us': expected an array");
    for (const json& x : repeats) {
      if (!x.is_number()) throw std::invalid_argument("field 'repeats_us': expected numbers");
      r.repeats_us.push_back(x.get<double>());
    }
    r.median_us = NumberField(j, "median_us", 0);
    r.cv = NumberField(j, "cv", 0);
    r.flops = NumberField(j, "flops", 0);
    const json& ec = Field(j, "error_class");
    if (!ec.is_string()) throw std::invalid_argument("field 'error_class': expected a string");
    absl::StatusOr<ErrorClass> parsed = ParseErrorClass(ec.get<std::string>());
    if (!parsed.ok()) return parsed.status();
    r.error_class = *parsed;
    r.error_msg = TextField(j, "error_msg", false);
    r.worker = TextField(j, "worker", false);
    r.lathe_version = TextField(j, "lathe_version", false);
    r.measured_at_ms = IntField(j, "measured_at", 0);
    r.inserted_at_ms = IntField(j, "inserted_at", 0);
    r.remeasured_at_ms = IntField(j, "remeasured_at", 0);
    return r;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
}

absl::StatusOr<int64_t> ExportJsonl(Database& db, std::ostream& out) {
  json header = {{"format", kFormat},
                 {"version", kJsonlVersion},
                 {"schema_version", kSchemaVersion},
                 {"exported_at", internal::NowMs()}};
  out << header.dump() << '\n';
  int64_t n = 0;
  absl::Status st = db.ForEachRecord([&](const Record& r) -> absl::Status {
    out << RecordToJsonLine(r) << '\n';
    if (!out) return absl::DataLossError("export: write failed");
    ++n;
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  out.flush();
  if (!out) return absl::DataLossError("export: write failed");
  return n;
}

absl::StatusOr<ImportStats> ImportJsonl(Database& db, std::istream& in, const std::string& source,
                                        const ImportOptions& options) {
  std::string line;
  bool too_long = false;
  int64_t line_no = 0;
  // Header.
  while (ReadBoundedLine(in, options.max_line_bytes, &line, &too_long)) {
    ++line_no;
    if (too_long) {
      return absl::FailedPreconditionError(absl::StrCat(
          source, ":", line_no, ": not a lathe records file (its first line is longer than ",
          options.max_line_bytes, " bytes)"));
    }
    if (!line.empty()) break;
  }
  if (line.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(source, ": empty file, no jsonl header"));
  }
  json header = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object() || !header.contains("format") ||
      header["format"] != kFormat) {
    return absl::FailedPreconditionError(absl::StrCat(
        source, ":", line_no, ": not a lathe records file (expected a header with \"format\": \"",
        kFormat, "\")"));
  }
  if (!header.contains("version") || !header["version"].is_number_integer()) {
    return absl::FailedPreconditionError(
        absl::StrCat(source, ":", line_no, ": header has no integer \"version\""));
  }
  int64_t version = header["version"].get<int64_t>();
  if (version > kJsonlVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(source, ": format version ", version, " is newer than this lathe supports (",
                     kJsonlVersion, "); use a newer lathe to import it"));
  }
  if (version < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(source, ": unknown format version ", version));
  }

  ImportStats stats;
  std::vector<Record> batch;
  auto flush = [&]() -> absl::Status {
    if (batch.empty()) return absl::OkStatus();
    absl::StatusOr<std::vector<InsertResult>> res = db.InsertBatch(batch);
    if (!res.ok()) return res.status();
    for (const InsertResult& r : *res) {
      if (r.inserted) {
        ++stats.inserted;
      } else {
        ++stats.duplicates;
      }
    }
    batch.clear();
    return absl::OkStatus();
  };
  auto refuse = [&](std::string candidate_id, std::string reason) {
    ++stats.refused;
    if (stats.refusals.size() < kMaxListedRefusals) {
      stats.refusals.push_back({line_no, std::move(candidate_id), std::move(reason)});
    }
  };
  while (ReadBoundedLine(in, options.max_line_bytes, &line, &too_long)) {
    ++line_no;
    if (too_long) {
      ++stats.records;
      refuse("", absl::StrCat("the line is longer than ", options.max_line_bytes, " bytes"));
      continue;
    }
    if (line.empty()) continue;
    absl::StatusOr<Record> r = RecordFromJsonLine(line);
    if (!r.ok()) {
      absl::Status fl = flush();
      (void)fl;  // the bad line is the error to report
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_no, ": ", r.status().message()));
    }
    ++stats.records;
    if (options.check) {
      if (absl::Status st = options.check(*r); !st.ok()) {
        refuse(r->candidate_id, std::string(st.message()));
        continue;
      }
    }
    batch.push_back(*std::move(r));
    if (batch.size() >= kImportBatch) {
      if (absl::Status st = flush(); !st.ok()) {
        return absl::Status(st.code(), absl::StrCat(source, ":", line_no, ": ", st.message()));
      }
    }
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(source, ": read failed"));
  if (absl::Status st = flush(); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat(source, ": ", st.message()));
  }
  return stats;
}

}  // namespace lathe::db
