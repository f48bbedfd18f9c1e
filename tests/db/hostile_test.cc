// 10,000 hostile strings (quotes, SQL comment and terminator sequences, NUL bytes, invalid
// UTF-8, random bytes) round-trip byte-exact through every text field, through the database
// and through JSONL export/import.

#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "db/database.h"
#include "db/jsonl.h"
#include "tests/db/test_util.h"

namespace lathe::db {
namespace {

using testing::SameContent;
using testing::TempDir;

std::vector<std::string> HostileStrings(int n) {
  const std::vector<std::string> seeds = {
      "",
      "'",
      "\"",
      "''",
      "';--",
      "'; DROP TABLE records; --",
      "\"); DELETE FROM workloads;--",
      std::string("\0", 1),
      std::string("a\0b", 3),
      std::string("\0\0\0'\0", 5),
      "\\",
      "\\0",
      "%s%n%x",
      "\xff",
      "\xfe\xff",
      "\xc0\xaf",
      "\xed\xa0\x80",
      "\xf4\x90\x80\x80",
      "\x80",
      "\xe2\x82",
      "caf\xc3\xa9",
      "\xf0\x9f\x98\x80",
      "\n\r\t\v\f",
      "?",
      "?1",
      ":name",
      "@p $p",
      "NULL",
      "null",
      "{\"base64\":\"AAAA\"}",
      "\x1b[31m",
      "\u202e",
      "/*",
      "*/",
      "`",
      "[",
  };
  std::mt19937 rng(42);
  std::vector<std::string> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    if (i < static_cast<int>(seeds.size())) {
      out.push_back(seeds[i]);
      continue;
    }
    std::string s;
    int parts = 1 + static_cast<int>(rng() % 6);
    for (int p = 0; p < parts; ++p) {
      switch (rng() % 3) {
        case 0:
          s += seeds[rng() % seeds.size()];
          break;
        case 1: {
          int len = static_cast<int>(rng() % 24);
          for (int k = 0; k < len; ++k) s += static_cast<char>(rng() & 0xff);
          break;
        }
        default: {
          int len = static_cast<int>(rng() % 16);
          for (int k = 0; k < len; ++k) s += static_cast<char>(0x20 + rng() % 95);
        }
      }
    }
    if (i % 1000 == 999) s += std::string(10000, '\xff');  // a few long ones
    out.push_back(std::move(s));
  }
  return out;
}

// A record whose every text field carries hostile strings; required fields get a unique,
// non-empty suffix so they stay valid and distinct.
Record HostileRecord(const std::vector<std::string>& h, int i) {
  auto at = [&](int k) -> const std::string& { return h[(i * 7 + k) % h.size()]; };
  Record r;
  std::string tag = "#" + std::to_string(i);
  r.candidate_id = h[i] + tag;
  r.workload = at(1) + tag;
  r.workload_key = at(2) + tag;
  r.device_class = at(3) + "#" + std::to_string(i % 50);
  r.trace_json = at(4);
  r.error_msg = at(5);
  r.worker = at(6);
  r.lathe_version = at(7);
  r.error_class = kAllErrorClasses[i % 6];
  r.repeats_us = {1.0 + i, 2.5, 0.125};
  r.median_us = 2.5;
  r.cv = CoefficientOfVariation(r.repeats_us);
  r.flops = i;
  r.measured_at_ms = 1700000000000 + i;
  return r;
}

TEST(HostileStringsTest, EveryTextFieldRoundTripsByteExact) {
  constexpr int kCount = 10000;
  std::vector<std::string> hostile = HostileStrings(kCount);
  std::vector<Record> records;
  for (int i = 0; i < kCount; ++i) records.push_back(HostileRecord(hostile, i));

  TempDir dir;
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(dir.File("h.db"));
  ASSERT_TRUE(db.ok()) << db.status();
  for (int start = 0; start < kCount; start += 500) {
    std::span<const Record> batch(records.data() + start, 500);
    absl::StatusOr<std::vector<InsertResult>> res = (*db)->InsertBatch(batch);
    ASSERT_TRUE(res.ok()) << res.status();
    for (const InsertResult& r : *res) ASSERT_TRUE(r.inserted);
  }

  for (int i = 0; i < kCount; ++i) {
    absl::StatusOr<std::optional<Record>> got = (*db)->GetByCandidateId(records[i].candidate_id);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value()) << "record " << i;
    ASSERT_TRUE(SameContent(**got, records[i])) << "record " << i;
    // Each JSONL line on its own.
    absl::StatusOr<Record> line = RecordFromJsonLine(RecordToJsonLine(records[i]));
    ASSERT_TRUE(line.ok()) << line.status();
    ASSERT_TRUE(SameContent(*line, records[i])) << "jsonl record " << i;
  }
  // Keyed lookups with hostile keys and device classes.
  for (int i = 0; i < kCount; i += 6) {  // error class ok
    absl::StatusOr<std::optional<Record>> best =
        (*db)->Best(records[i].workload_key, records[i].device_class);
    ASSERT_TRUE(best.ok()) << best.status();
    ASSERT_TRUE(best->has_value()) << "record " << i;
    EXPECT_EQ((*best)->candidate_id, records[i].candidate_id);
  }
  absl::StatusOr<std::vector<std::string>> traces =
      (*db)->MeasuredTraces(records[1].workload_key, records[1].device_class);
  ASSERT_TRUE(traces.ok());
  EXPECT_EQ(*traces, std::vector<std::string>{records[1].trace_json});

  // Through a JSONL file into a second database.
  std::stringstream jsonl;
  absl::StatusOr<int64_t> exported = ExportJsonl(**db, jsonl);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(*exported, kCount);
  absl::StatusOr<std::unique_ptr<Database>> copy = Database::Open(dir.File("copy.db"));
  ASSERT_TRUE(copy.ok()) << copy.status();
  absl::StatusOr<ImportStats> imported = ImportJsonl(**copy, jsonl, "hostile.jsonl");
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->inserted, kCount);
  int i = 0;
  absl::Status st = (*copy)->ForEachRecord([&](const Record& r) {
    if (!SameContent(r, records[i])) return absl::InternalError("mismatch at " + std::to_string(i));
    ++i;
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(i, kCount);
  EXPECT_TRUE((*copy)->IntegrityCheck()->empty());
}

}  // namespace
}  // namespace lathe::db
