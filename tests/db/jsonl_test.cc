#include "db/jsonl.h"

#include <gtest/gtest.h>

#include <sstream>

#include "tests/db/test_util.h"

namespace lathe::db {
namespace {

using testing::MakeRecord;
using testing::SameContent;
using testing::TempDir;

constexpr char kCpu[] = "cpu:Test CPU:avx2:4c";

std::unique_ptr<Database> Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path);
  EXPECT_TRUE(db.ok()) << db.status();
  return db.ok() ? std::move(*db) : nullptr;
}

TEST(JsonlTest, ExportImportMergesWithoutDuplicates) {
  TempDir dir;
  auto a = Open(dir.File("a.db"));
  auto b = Open(dir.File("b.db"));
  ASSERT_TRUE(a && b);
  std::vector<Record> in_a = {MakeRecord("r1", "1", kCpu, 5), MakeRecord("r2", "1", kCpu, 3),
                              MakeRecord("r3", "2", kCpu, 0, ErrorClass::kCompileError)};
  ASSERT_TRUE(a->InsertBatch(in_a).ok());
  ASSERT_TRUE(b->Insert(MakeRecord("r2", "1", kCpu, 3)).ok());  // overlap
  ASSERT_TRUE(b->Insert(MakeRecord("r9", "1", kCpu, 1)).ok());  // only in b

  std::stringstream file;
  absl::StatusOr<int64_t> n = ExportJsonl(*a, file);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 3);
  std::string text = file.str();
  EXPECT_EQ(text.rfind("{\"exported_at\":", 0), 0u) << text;
  EXPECT_NE(text.find("\"format\":\"lathe-records\""), std::string::npos);

  std::stringstream in1(text);
  absl::StatusOr<ImportStats> s = ImportJsonl(*b, in1, "a.jsonl");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->records, 3);
  EXPECT_EQ(s->inserted, 2);
  EXPECT_EQ(s->duplicates, 1);
  std::stringstream in2(text);
  s = ImportJsonl(*b, in2, "a.jsonl");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->inserted, 0);
  EXPECT_EQ(s->duplicates, 3);
  EXPECT_EQ(b->GetStats()->records, 4);
  for (const Record& r : in_a) {
    absl::StatusOr<std::optional<Record>> got = b->GetByCandidateId(r.candidate_id);
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_TRUE(SameContent(**got, r)) << r.candidate_id;
  }
  EXPECT_EQ((*b->Best("key-1", kCpu))->candidate_id, "r9");
}

TEST(JsonlTest, LineFormatIsStable) {
  Record r = MakeRecord("c", "1", kCpu, 2);
  r.repeats_us = {2};
  r.cv = 0;
  r.inserted_at_ms = 5;
  EXPECT_EQ(RecordToJsonLine(r),
            "{\"candidate_id\":\"c\",\"cv\":0.0,\"device_class\":\"cpu:Test CPU:avx2:4c\","
            "\"error_class\":\"ok\",\"error_msg\":\"\",\"flops\":524288.0,\"inserted_at\":5,"
            "\"lathe_version\":\"0.1.0\",\"measured_at\":1700000000000,\"median_us\":2.0,"
            "\"remeasured_at\":0,\"repeats_us\":[2.0],\"trace\":\"{\\\"trace\\\":\\\"c\\\"}\","
            "\"worker\":\"worker-1\","
            "\"workload\":\"matmul:k=1,m=64,n=64\",\"workload_key\":\"key-1\"}");
  r.worker = "bad\xff";
  std::string line = RecordToJsonLine(r);
  EXPECT_NE(line.find("\"worker\":{\"base64\":\"YmFk/w==\"}"), std::string::npos) << line;
  absl::StatusOr<Record> back = RecordFromJsonLine(line);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->worker, r.worker);
}

TEST(JsonlTest, NewerVersionIsRefusedAndNothingWritten) {
  TempDir dir;
  auto db = Open(dir.File("t.db"));
  ASSERT_NE(db, nullptr);
  std::stringstream in("{\"format\":\"lathe-records\",\"version\":2}\n" +
                       RecordToJsonLine(MakeRecord("x", "1", kCpu, 1)) + "\n");
  absl::StatusOr<ImportStats> s = ImportJsonl(*db, in, "future.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.status().message(),
            "future.jsonl: format version 2 is newer than this lathe supports (1); use a newer "
            "lathe to import it");
  EXPECT_EQ(db->GetStats()->records, 0);
}

TEST(JsonlTest, ForeignAndMalformedInput) {
  TempDir dir;
  auto db = Open(dir.File("t.db"));
  ASSERT_NE(db, nullptr);
  std::stringstream empty("");
  EXPECT_EQ(ImportJsonl(*db, empty, "e.jsonl").status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::stringstream foreign("{\"hello\":1}\n");
  absl::StatusOr<ImportStats> s = ImportJsonl(*db, foreign, "f.jsonl");
  EXPECT_NE(s.status().message().find("not a lathe records file"), std::string::npos) << s.status();
  std::stringstream bad("{\"format\":\"lathe-records\",\"version\":1}\n" +
                        RecordToJsonLine(MakeRecord("ok1", "1", kCpu, 1)) +
                        "\n{\"candidate_id\":\"x\"\n");
  s = ImportJsonl(*db, bad, "bad.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "bad.jsonl:3: malformed json");
  std::stringstream wrong_type(
      "{\"format\":\"lathe-records\",\"version\":1}\n"
      "{\"candidate_id\":\"x\",\"workload\":1}\n");
  s = ImportJsonl(*db, wrong_type, "w.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("w.jsonl:2: field 'workload'"), std::string::npos)
      << s.status();
  // Unknown keys are ignored.
  std::string extra = RecordToJsonLine(MakeRecord("e1", "1", kCpu, 1));
  extra.insert(1, "\"added_in_future\":[1,2],");
  std::stringstream fwd("{\"format\":\"lathe-records\",\"version\":1,\"x\":0}\n" + extra + "\n");
  s = ImportJsonl(*db, fwd, "fwd.jsonl");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->inserted, 1);
}

TEST(JsonlTest, CheckedRecordsAreRefusedByLineAndTheRestImported) {
  TempDir dir;
  auto db = Open(dir.File("t.db"));
  ASSERT_NE(db, nullptr);
  std::stringstream in("{\"format\":\"lathe-records\",\"version\":1}\n" +
                       RecordToJsonLine(MakeRecord("good1", "1", kCpu, 4)) + "\n" +
                       RecordToJsonLine(MakeRecord("bad", "1", kCpu, 1e-9)) + "\n\n" +
                       RecordToJsonLine(MakeRecord("good2", "2", kCpu, 4)) + "\n");
  ImportOptions options;
  options.check = [](const Record& r) {
    return r.median_us < 1e-3 ? absl::InvalidArgumentError("impossibly fast") : absl::OkStatus();
  };
  absl::StatusOr<ImportStats> s = ImportJsonl(*db, in, "mixed.jsonl", options);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->records, 3);
  EXPECT_EQ(s->inserted, 2);
  EXPECT_EQ(s->refused, 1);
  ASSERT_EQ(s->refusals.size(), 1u);
  EXPECT_EQ(s->refusals[0].line, 3);
  EXPECT_EQ(s->refusals[0].candidate_id, "bad");
  EXPECT_EQ(s->refusals[0].reason, "impossibly fast");
  EXPECT_FALSE(db->GetByCandidateId("bad")->has_value());
  EXPECT_EQ((*db->Best("key-1", kCpu))->candidate_id, "good1");
}

TEST(JsonlTest, OverlongLinesAreRefusedAsTheyStreamPast) {
  TempDir dir;
  auto db = Open(dir.File("t.db"));
  ASSERT_NE(db, nullptr);
  // A record padded past the default 16 MiB bound, between two good ones.
  Record padded = MakeRecord("padded", "1", kCpu, 4);
  padded.error_msg = std::string(kMaxJsonlLineBytes, 'x');
  std::stringstream in("{\"format\":\"lathe-records\",\"version\":1}\n" +
                       RecordToJsonLine(MakeRecord("a", "1", kCpu, 4)) + "\n" +
                       RecordToJsonLine(padded) + "\n" +
                       RecordToJsonLine(MakeRecord("b", "1", kCpu, 5)));  // no final newline
  absl::StatusOr<ImportStats> s = ImportJsonl(*db, in, "big.jsonl");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->inserted, 2);
  EXPECT_EQ(s->refused, 1);
  ASSERT_EQ(s->refusals.size(), 1u);
  EXPECT_EQ(s->refusals[0].line, 3);
  EXPECT_EQ(s->refusals[0].reason, "the line is longer than 16777216 bytes");
  // A first line over the bound is no header.
  ImportOptions small;
  small.max_line_bytes = 8;
  std::stringstream header("{\"format\":\"lathe-records\",\"version\":1}\n");
  s = ImportJsonl(*db, header, "h.jsonl", small);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace lathe::db
