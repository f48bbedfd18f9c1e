#include "db/database.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/db/store_param.h"
#include "tests/db/test_util.h"

namespace lathe::db {
namespace {

using testing::MakeRecord;
using testing::SameContent;
using testing::TempDir;

constexpr char kCpu2[] = "cpu:Test CPU @ 3GHz:avx512:2c";
constexpr char kCpu4[] = "cpu:Test CPU @ 3GHz:avx512:4c";

class DatabaseTest : public testing::StoreTest {};
LATHE_INSTANTIATE_STORE_TEST(DatabaseTest);

std::unique_ptr<Database> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path);
  EXPECT_TRUE(db.ok()) << db.status();
  return db.ok() ? std::move(*db) : nullptr;
}

TEST(ErrorClassTest, NamesRoundTrip) {
  for (ErrorClass c : kAllErrorClasses) {
    absl::StatusOr<ErrorClass> back = ParseErrorClass(ErrorClassName(c));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, c);
  }
  EXPECT_EQ(ErrorClassName(ErrorClass::kWrongAnswer), "wrong_answer");
  EXPECT_FALSE(ParseErrorClass("OK").ok());
}

TEST(StatisticsTest, MedianAndCv) {
  EXPECT_EQ(Median(std::vector<double>{}), 0);
  EXPECT_EQ(Median(std::vector<double>{3, 1, 2}), 2);
  EXPECT_EQ(Median(std::vector<double>{4, 1, 3, 2}), 2.5);
  EXPECT_EQ(CoefficientOfVariation(std::vector<double>{5}), 0);
  EXPECT_NEAR(CoefficientOfVariation(std::vector<double>{1, 3}), std::sqrt(2.0) / 2, 1e-12);
}

TEST_P(DatabaseTest, BestIsLowestOkMedian) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Insert(MakeRecord("a", "1", kCpu2, 30)).ok());
  ASSERT_TRUE(db->Insert(MakeRecord("b", "1", kCpu2, 10)).ok());
  ASSERT_TRUE(db->Insert(MakeRecord("c", "1", kCpu2, 20)).ok());
  // Faster, but failed or on another device class or workload: never the best.
  Record wrong = MakeRecord("d", "1", kCpu2, 1, ErrorClass::kWrongAnswer);
  wrong.repeats_us = {1, 1, 1};
  wrong.median_us = 1;
  ASSERT_TRUE(db->Insert(wrong).ok());
  ASSERT_TRUE(db->Insert(MakeRecord("e", "1", kCpu4, 2)).ok());
  ASSERT_TRUE(db->Insert(MakeRecord("f", "2", kCpu2, 3)).ok());

  absl::StatusOr<std::optional<Record>> best = db->Best("key-1", kCpu2);
  ASSERT_TRUE(best.ok()) << best.status();
  ASSERT_TRUE(best->has_value());
  EXPECT_EQ((*best)->candidate_id, "b");
  EXPECT_TRUE(testing::SameContent(**best, MakeRecord("b", "1", kCpu2, 10)));
  EXPECT_GT((*best)->inserted_at_ms, 0);
  EXPECT_NEAR((*best)->Gflops(), 2.0 * 64 * 64 * 64 / 10e3, 1e-9);

  absl::StatusOr<std::vector<Record>> top = db->TopK("key-1", kCpu2, 2);
  ASSERT_TRUE(top.ok());
  ASSERT_EQ(top->size(), 2u);
  EXPECT_EQ((*top)[0].candidate_id, "b");
  EXPECT_EQ((*top)[1].candidate_id, "c");
  top = db->TopK("key-1", kCpu2, 100);
  ASSERT_TRUE(top.ok());
  EXPECT_EQ(top->size(), 3u);

  absl::StatusOr<std::optional<Record>> none = db->Best("key-1", "cpu:other:avx2:2c");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  none = db->Best("no-such-key", kCpu2);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  absl::StatusOr<Stats> stats = db->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->workloads, 2);
  EXPECT_EQ(stats->device_classes, 2);
  EXPECT_EQ(stats->records, 6);
  EXPECT_EQ(stats->ok_records, 5);
  EXPECT_EQ(stats->by_error_class["wrong_answer"], 1);
  EXPECT_EQ(stats->schema_version, kSchemaVersion);
}

// The dashboard's tuning curve: every record of a workload on a device class, failures
// included, in the order they were measured (not inserted).
TEST_P(DatabaseTest, TimelineListsTrialsInMeasurementOrder) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  Record late = MakeRecord("late", "1", kCpu2, 10);
  late.measured_at_ms = 3000;
  Record early = MakeRecord("early", "1", kCpu2, 30);
  early.measured_at_ms = 1000;
  Record failed = MakeRecord("failed", "1", kCpu2, 0, ErrorClass::kCompileError);
  failed.measured_at_ms = 2000;
  Record other_class = MakeRecord("other", "1", kCpu4, 5);
  other_class.measured_at_ms = 1500;
  for (const Record& r : {late, early, failed, other_class}) ASSERT_TRUE(db->Insert(r).ok());

  absl::StatusOr<std::vector<TimelinePoint>> t = db->Timeline("key-1", kCpu2);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ((*t)[0].measured_at_ms, 1000);
  EXPECT_EQ((*t)[0].median_us, 30);
  EXPECT_EQ((*t)[1].error_class, ErrorClass::kCompileError);
  EXPECT_EQ((*t)[2].median_us, 10);
  EXPECT_EQ((*t)[2].flops, late.flops);

  t = db->Timeline("key-1", "cpu:unknown:avx2:2c");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->empty());
  t = db->Timeline("no-such-key", kCpu2);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->empty());
}

TEST_P(DatabaseTest, TopOfRelatedWorkloadsTakesTheBestOfEachOtherWorkloadOfTheOp) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  for (const auto& [id, w, us] : std::vector<std::tuple<std::string, std::string, double>>{
           {"own", "1", 1}, {"a1", "2", 30}, {"a2", "2", 10}, {"a3", "2", 20}, {"b1", "3", 50}}) {
    ASSERT_TRUE(db->Insert(MakeRecord(id, w, kCpu2, us)).ok());
  }
  // Not related: another device class, a failed record, another operator.
  ASSERT_TRUE(db->Insert(MakeRecord("other-class", "2", kCpu4, 1)).ok());
  ASSERT_TRUE(db->Insert(MakeRecord("failed", "3", kCpu2, 0, ErrorClass::kRuntimeError)).ok());
  Record conv = MakeRecord("conv", "4", kCpu2, 1);
  conv.workload = "conv2d:c=8,h=8,k=8,n=1,r=3,s=3,w=8";
  ASSERT_TRUE(db->Insert(conv).ok());

  auto ids = [&](int per, int k) {
    std::vector<std::string> out;
    auto r = db->TopOfRelatedWorkloads("matmul", kCpu2, "key-1", per, k);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) {
      for (const Record& x : *r) out.push_back(x.candidate_id);
    }
    return out;
  };
  // Each workload's best first, then each one's second.
  EXPECT_EQ(ids(2, 10), (std::vector<std::string>{"a2", "b1", "a3"}));
  EXPECT_EQ(ids(1, 10), (std::vector<std::string>{"a2", "b1"}));
  EXPECT_EQ(ids(2, 1), (std::vector<std::string>{"a2"}));
  EXPECT_TRUE(ids(0, 10).empty());
  auto none = db->TopOfRelatedWorkloads("matmul", "cpu:unknown:avx2:2c", "key-1", 2, 10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_P(DatabaseTest, SameCandidateIdIsNotDuplicated) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  absl::StatusOr<InsertResult> first = db->Insert(MakeRecord("x", "1", kCpu2, 5));
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->inserted);
  absl::StatusOr<InsertResult> again = db->Insert(MakeRecord("x", "1", kCpu2, 7));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->inserted);
  EXPECT_EQ(again->id, first->id);
  // Within one batch too.
  std::vector<Record> batch = {MakeRecord("y", "1", kCpu2, 5), MakeRecord("y", "1", kCpu2, 5)};
  absl::StatusOr<std::vector<InsertResult>> res = db->InsertBatch(batch);
  ASSERT_TRUE(res.ok());
  EXPECT_TRUE((*res)[0].inserted);
  EXPECT_FALSE((*res)[1].inserted);
  EXPECT_EQ(db->GetStats()->records, 2);
  absl::StatusOr<std::optional<Record>> x = db->GetByCandidateId("x");
  ASSERT_TRUE(x.ok() && x->has_value());
  EXPECT_EQ((*x)->median_us, 5);
}

TEST_P(DatabaseTest, HasCandidatesAnswersEachIdInOrder) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Insert(MakeRecord("a", "1", kCpu2, 5)).ok());
  ASSERT_TRUE(db->Insert(MakeRecord("c", "1", kCpu2, 6)).ok());
  const std::vector<std::string> ids = {"a", "b", "c", "a", ""};
  absl::StatusOr<std::vector<bool>> has = db->HasCandidates(ids);
  ASSERT_TRUE(has.ok()) << has.status();
  EXPECT_EQ(*has, (std::vector<bool>{true, false, true, true, false}));
  absl::StatusOr<std::vector<bool>> none = db->HasCandidates({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_P(DatabaseTest, EmptyCandidateIdGetsAStableOne) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  Record r = MakeRecord("", "1", kCpu2, 5);
  absl::StatusOr<InsertResult> a = db->Insert(r);
  absl::StatusOr<InsertResult> b = db->Insert(r);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->inserted);
  EXPECT_FALSE(b->inserted);
  absl::StatusOr<std::optional<Record>> best = db->Best("key-1", kCpu2);
  ASSERT_TRUE(best.ok() && best->has_value());
  EXPECT_EQ((*best)->candidate_id.rfind("auto:", 0), 0u);
}

TEST_P(DatabaseTest, MedianAndCvDerivedFromRepeats) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  Record r = MakeRecord("r", "1", kCpu2, 0);
  r.repeats_us = {4, 1, 3, 2};
  r.median_us = 0;
  r.cv = 0;
  ASSERT_TRUE(db->Insert(r).ok());
  absl::StatusOr<std::optional<Record>> got = db->GetByCandidateId("r");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->median_us, 2.5);
  EXPECT_NEAR((*got)->cv, CoefficientOfVariation(r.repeats_us), 1e-12);
  EXPECT_EQ((*got)->repeats_us, r.repeats_us);
}

TEST_P(DatabaseTest, AddRepeatsKeepsEveryRepeatAndCanDethroneALuckyBest) {
  const std::string path = Location();
  auto db = OpenOrDie(path);
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Insert(MakeRecord("lucky", "1", kCpu2, 10)).ok());
  ASSERT_TRUE(db->Insert(MakeRecord("steady", "1", kCpu2, 12)).ok());
  EXPECT_EQ((*db->Best("key-1", kCpu2))->candidate_id, "lucky");

  // The careful figure of the lucky one is 15 us: five repeats outweigh its three.
  absl::StatusOr<Record> up = db->AddRepeats("lucky", std::vector<double>(5, 15.0), 1800000000000);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->repeats_us.size(), 8u);
  EXPECT_EQ(up->median_us, 15);
  EXPECT_GT(up->cv, 0);
  EXPECT_EQ(up->remeasured_at_ms, 1800000000000);
  EXPECT_EQ(up->measured_at_ms, 1700000000000);  // the first measurement's time stays
  db.reset();
  db = OpenOrDie(path);  // durable
  ASSERT_NE(db, nullptr);
  absl::StatusOr<std::optional<Record>> best = db->Best("key-1", kCpu2);
  ASSERT_TRUE(best.ok() && best->has_value());
  EXPECT_EQ((*best)->candidate_id, "steady");
  EXPECT_EQ((*best)->remeasured_at_ms, 0);
  absl::StatusOr<std::optional<Record>> lucky = db->GetByCandidateId("lucky");
  ASSERT_TRUE(lucky.ok() && lucky->has_value());
  EXPECT_TRUE(SameContent(**lucky, *up));

  EXPECT_EQ(db->AddRepeats("nobody", std::vector<double>{1}, 1).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(db->Insert(MakeRecord("slow", "1", kCpu2, 0, ErrorClass::kTimeout)).ok());
  EXPECT_EQ(db->AddRepeats("slow", std::vector<double>{1}, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  for (std::vector<double> bad : {std::vector<double>{}, std::vector<double>{1, -1},
                                  std::vector<double>{std::nan("")}, std::vector<double>{0}}) {
    EXPECT_EQ(db->AddRepeats("steady", bad, 1).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ((*db->GetByCandidateId("steady"))->repeats_us.size(), 3u);  // refused: untouched
}

TEST_P(DatabaseTest, InvalidRecordsAreRefused) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  Record no_median = MakeRecord("a", "1", kCpu2, 5);
  no_median.repeats_us.clear();
  no_median.median_us = 0;
  EXPECT_EQ(db->Insert(no_median).status().code(), absl::StatusCode::kInvalidArgument);
  Record nan = MakeRecord("b", "1", kCpu2, 5);
  nan.median_us = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(db->Insert(nan).status().code(), absl::StatusCode::kInvalidArgument);
  Record no_key = MakeRecord("c", "1", kCpu2, 5);
  no_key.workload_key.clear();
  EXPECT_EQ(db->Insert(no_key).status().code(), absl::StatusCode::kInvalidArgument);
  Record no_class = MakeRecord("d", "1", "", 5);
  EXPECT_EQ(db->Insert(no_class).status().code(), absl::StatusCode::kInvalidArgument);

  // A key already bound to another spec; the whole batch rolls back.
  ASSERT_TRUE(db->Insert(MakeRecord("e", "1", kCpu2, 5)).ok());
  Record clash = MakeRecord("f", "1", kCpu2, 5);
  clash.workload = "matmul:k=999,m=1,n=1";
  std::vector<Record> batch = {MakeRecord("g", "2", kCpu2, 5), clash};
  absl::StatusOr<std::vector<InsertResult>> res = db->InsertBatch(batch);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(res.status().message().find("already used by spec"), std::string::npos) << res.status();
  EXPECT_EQ(db->GetStats()->records, 1);
  EXPECT_FALSE(db->GetByCandidateId("g")->has_value());
}

TEST_P(DatabaseTest, MeasuredTraces) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Insert(MakeRecord("a", "1", kCpu2, 5)).ok());
  ASSERT_TRUE(db->Insert(MakeRecord("b", "1", kCpu2, 0, ErrorClass::kTimeout)).ok());
  ASSERT_TRUE(db->Insert(MakeRecord("c", "1", kCpu4, 5)).ok());
  ASSERT_TRUE(db->Insert(MakeRecord("d", "2", kCpu2, 5)).ok());
  absl::StatusOr<std::vector<std::string>> t = db->MeasuredTraces("key-1", kCpu2);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, (std::vector<std::string>{"{\"trace\":\"a\"}", "{\"trace\":\"b\"}"}));
  t = db->MeasuredTraces("key-1", "");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->size(), 3u);
  t = db->MeasuredTraces("key-1", "cpu:unknown:sse4.2:1c");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->empty());
  t = db->MeasuredTraces("key-9", kCpu2);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->empty());
}

TEST_P(DatabaseTest, RecordsSurviveReopen) {
  std::string path = Location();
  {
    auto db = OpenOrDie(path);
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(db->Insert(MakeRecord("a", "1", kCpu2, 5)).ok());
  }
  auto db = OpenOrDie(path);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(*db->SchemaVersion(), kSchemaVersion);
  EXPECT_TRUE(db->GetByCandidateId("a")->has_value());
  absl::StatusOr<std::vector<std::string>> problems = db->IntegrityCheck();
  ASSERT_TRUE(problems.ok());
  EXPECT_TRUE(problems->empty());
}

TEST_P(DatabaseTest, CostModels) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  EXPECT_FALSE(db->GetCostModel(kCpu2)->has_value());
  std::string bytes("\0\x01\xffmodel", 8);
  ASSERT_TRUE(db->PutCostModel({kCpu2, "xgboost-ubj-1", bytes, 100, 0}).ok());
  ASSERT_TRUE(db->PutCostModel({kCpu2, "xgboost-ubj-1", bytes + "v2", 120, 0}).ok());
  absl::StatusOr<std::optional<CostModelBlob>> got = db->GetCostModel(kCpu2);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->model, bytes + "v2");
  EXPECT_EQ((*got)->trained_on, 120);
  EXPECT_EQ((*got)->format, "xgboost-ubj-1");
  EXPECT_FALSE(db->GetCostModel(kCpu4)->has_value());
}

TEST_P(DatabaseTest, FeaturesRoundTripAndBadSizesAreRefused) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  std::string data(2 * 3 * 4, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  std::vector<StoredFeatures> rows = {{"a", 1, 2, 3, data}, {"b", 1, 0, 3, ""}};
  ASSERT_TRUE(db->PutFeatures(rows).ok());
  rows[0].version = 2;  // replaced, not duplicated
  ASSERT_TRUE(db->PutFeatures(std::vector<StoredFeatures>{rows[0]}).ok());
  std::vector<std::string> ids = {"b", "missing", "a"};
  absl::StatusOr<std::vector<std::optional<StoredFeatures>>> got = db->GetFeatures(ids);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 3u);
  ASSERT_TRUE((*got)[0].has_value());
  EXPECT_EQ((*got)[0]->num_rows, 0);
  EXPECT_FALSE((*got)[1].has_value());
  ASSERT_TRUE((*got)[2].has_value());
  EXPECT_EQ((*got)[2]->version, 2);
  EXPECT_EQ((*got)[2]->num_cols, 3);
  EXPECT_EQ((*got)[2]->data, data);
  // A size that does not match, or no id: refused, nothing written.
  EXPECT_TRUE(absl::IsInvalidArgument(
      db->PutFeatures(std::vector<StoredFeatures>{{"c", 1, 2, 3, "short"}})));
  EXPECT_TRUE(
      absl::IsInvalidArgument(db->PutFeatures(std::vector<StoredFeatures>{{"", 1, 0, 3, ""}})));
  std::vector<std::string> c = {"c"};
  EXPECT_FALSE((*db->GetFeatures(c))[0].has_value());
}

// A queued job of device class kCpu2.
Job TestJob(const std::string& uid, const std::string& spec_json) {
  Job job;
  job.uid = uid;
  job.spec_json = spec_json;
  job.device_class = kCpu2;
  job.trials_requested = 64;
  return job;
}

TEST_P(DatabaseTest, Jobs) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  Job job = TestJob("job-1", "{\"workloads\":[\"matmul:k=1,m=1,n=1\"]}");
  ASSERT_TRUE(db->CreateJob(job).ok());
  EXPECT_EQ(db->CreateJob(job).code(), absl::StatusCode::kAlreadyExists);
  job.uid = "job-2";
  ASSERT_TRUE(db->CreateJob(job).ok());
  ASSERT_TRUE(db->UpdateJob("job-1", JobState::kRunning, 10, "").ok());
  EXPECT_EQ(db->UpdateJob("job-9", JobState::kDone, 0, "").code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::optional<Job>> got = db->GetJob("job-1");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->state, JobState::kRunning);
  EXPECT_EQ((*got)->trials_done, 10);
  EXPECT_EQ((*got)->spec_json, job.spec_json);
  absl::StatusOr<std::vector<Job>> queued = db->ListJobs(JobState::kQueued);
  ASSERT_TRUE(queued.ok());
  ASSERT_EQ(queued->size(), 1u);
  EXPECT_EQ((*queued)[0].uid, "job-2");
  EXPECT_EQ(db->ListJobs()->size(), 2u);
}

// UpdateJobAndSpec replaces the spec with the state in one step; the other job is untouched.
TEST_P(DatabaseTest, UpdateJobAndSpecReplacesTheSpec) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->CreateJob(TestJob("job-1", "{\"trials\":8}")).ok());
  ASSERT_TRUE(db->CreateJob(TestJob("job-2", "{\"trials\":8}")).ok());
  ASSERT_TRUE(
      db->UpdateJobAndSpec("job-1", JobState::kCancelled, 3, "stopped", "{\"trials\":8,\"done\":3}")
          .ok());
  EXPECT_EQ(db->UpdateJobAndSpec("job-9", JobState::kDone, 0, "", "{}").code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<std::optional<Job>> one = db->GetJob("job-1");
  ASSERT_TRUE(one.ok() && one->has_value());
  EXPECT_EQ((*one)->state, JobState::kCancelled);
  EXPECT_EQ((*one)->trials_done, 3);
  EXPECT_EQ((*one)->error_msg, "stopped");
  EXPECT_EQ((*one)->spec_json, "{\"trials\":8,\"done\":3}");
  absl::StatusOr<std::optional<Job>> two = db->GetJob("job-2");
  ASSERT_TRUE(two.ok() && two->has_value());
  EXPECT_EQ((*two)->state, JobState::kQueued);
  EXPECT_EQ((*two)->spec_json, "{\"trials\":8}");
}

// Every text field keeps its bytes: NUL bytes and invalid UTF-8 (PostgreSQL stores them as
// BYTEA).
TEST_P(DatabaseTest, TextIsStoredByteExact) {
  auto db = OpenOrDie(Location());
  ASSERT_NE(db, nullptr);
  Record r = MakeRecord(std::string("nul\0id", 6), "1", kCpu2, 10);
  r.trace_json = std::string("{\"a\":\"\xff\xfe\0x\"}", 12);
  r.worker = std::string("w\0\x80", 3);
  r.lathe_version = "\xc3\x28";
  ASSERT_TRUE(db->Insert(r).ok());
  absl::StatusOr<std::optional<Record>> got = db->GetByCandidateId(r.candidate_id);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_TRUE(SameContent(**got, r));
  EXPECT_FALSE(db->GetByCandidateId("nul")->has_value());
}

// A job claimed through one open database is refused to another until the first is closed
// (PostgreSQL: daemons sharing a store never run one job twice); a SQLite file has one daemon.
TEST_P(DatabaseTest, JobClaims) {
  auto a = OpenOrDie(Location());
  auto b = OpenOrDie(Location());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(*a->ClaimJob("job-1"));
  EXPECT_TRUE(absl::IsInvalidArgument(a->ClaimJob("").status()));
  if (!IsPostgres()) {
    EXPECT_TRUE(*b->ClaimJob("job-1"));
    return;
  }
  EXPECT_FALSE(*b->ClaimJob("job-1"));
  EXPECT_TRUE(*b->ClaimJob("job-2"));
  EXPECT_FALSE(*a->ClaimJob("job-2"));
  ASSERT_TRUE(b->ReleaseJob("job-2").ok());
  EXPECT_TRUE(*a->ClaimJob("job-2"));
  a.reset();  // a daemon that exits (or dies) frees its jobs, once the server saw it go
  bool freed = false;
  for (int i = 0; i < 500 && !freed; ++i) {
    freed = *b->ClaimJob("job-1");
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(freed);
}

}  // namespace
}  // namespace lathe::db
