// Tests of the XGBoost cost model: learning a known function, ranking held-out programs,
// persistence (bytes and database), error handling.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cost_model/database_io.h"
#include "cost_model/features.h"
#include "cost_model/xgb_model.h"
#include "db/database.h"
#include "gtest/gtest.h"
#include "ir/schedule.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "proto/trace_io.h"

namespace lathe::cost_model {
namespace {

// Programs of 1-3 random rows; throughput is a known function of the features.
struct Synthetic {
  std::vector<FeatureMatrix> programs;
  std::vector<double> throughputs;
  std::vector<std::string> keys;
};

// With `additive`, a program's throughput grows with the sum of its rows' scores (what the
// pack-sum objective models) instead of their mean.
Synthetic MakeSynthetic(int n, uint64_t seed, bool additive = false) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 8.f);
  std::uniform_int_distribution<int> rows(1, 3);
  Synthetic s;
  for (int p = 0; p < n; ++p) {
    FeatureMatrix m;
    m.num_rows = rows(rng);
    double score = 0;
    for (int r = 0; r < m.num_rows; ++r) {
      std::vector<float> row(kNumFeatures);
      for (float& v : row) v = u(rng);
      score += 0.6 * row[3] - 0.4 * row[20] + 0.3 * std::min(row[40], row[41]) +
               (row[100] > 4 ? 1.0 : 0.0);
      m.data.insert(m.data.end(), row.begin(), row.end());
    }
    // Positive: score > -3.2 per row.
    s.throughputs.push_back(additive ? 5.0 * m.num_rows + score : 5.0 + score / m.num_rows);
    s.keys.push_back(p % 2 == 0 ? "w0" : "w1");
    s.programs.push_back(std::move(m));
  }
  return s;
}

CostModelOptions FastOptions() {
  CostModelOptions o;
  o.max_rounds = 120;
  o.max_depth = 6;
  o.nthread = 1;  // OpenMP threads spin badly on a loaded 2-core machine
  return o;
}

// Pairwise accuracy above 0.8 within each workload of `test`, as the search ranks.
void ExpectRanksEachWorkload(const Synthetic& test, const std::vector<float>& scores) {
  for (const std::string key : {"w0", "w1"}) {
    std::vector<float> s, l;
    for (size_t i = 0; i < test.programs.size(); ++i) {
      if (test.keys[i] != key) continue;
      s.push_back(scores[i]);
      l.push_back(static_cast<float>(test.throughputs[i]));
    }
    EXPECT_GT(PairwiseAccuracy(s, l), 0.8) << key;
  }
}

CostModel TrainedModel() {
  Synthetic s = MakeSynthetic(200, 7);
  CostModel model(FastOptions());
  EXPECT_TRUE(model.Update(s.programs, s.throughputs, s.keys).ok());
  EXPECT_TRUE(model.trained());
  return model;
}

class ObjectiveTest : public ::testing::TestWithParam<Objective> {};

TEST_P(ObjectiveTest, RanksHeldOutProgramsOfAKnownFunction) {
  // Row regression and pack-sum fit per-program labels, so each gets throughputs of the form
  // it can express (mean, sum of rows); the pairwise objective only needs their order.
  const bool additive = GetParam() == Objective::kPackSumRegression;
  Synthetic train = MakeSynthetic(400, 1, additive);
  Synthetic test = MakeSynthetic(150, 2, additive);
  CostModelOptions options = FastOptions();
  options.objective = GetParam();
  CostModel model(options);
  ASSERT_TRUE(model.Update(train.programs, train.throughputs, train.keys).ok());
  ASSERT_TRUE(model.trained());
  EXPECT_EQ(model.trained_on(), 400);
  auto scores = model.Predict(test.programs);
  ASSERT_TRUE(scores.ok()) << scores.status();
  ASSERT_EQ(scores->size(), test.programs.size());
  // Rank within each workload, as the search does.
  ExpectRanksEachWorkload(test, *scores);
  // The aggregation (mean or sum of rows) survives a save and load.
  auto bytes = model.Save();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto loaded = CostModel::Load(*bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto again = loaded->Predict(test.programs);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *scores);
}

INSTANTIATE_TEST_SUITE_P(Objectives, ObjectiveTest,
                         ::testing::Values(Objective::kRowRegression, Objective::kPackSumRegression,
                                           Objective::kPairwiseRank),
                         [](const ::testing::TestParamInfo<Objective>& info) {
                           std::string name = ObjectiveName(info.param);
                           name.erase(std::remove(name.begin(), name.end(), '-'), name.end());
                           return name;
                         });

// The pairwise objective orders programs of one workload; labels of other workloads do not
// pull on it. Two workloads whose throughputs differ 100x are ranked as well as one.
TEST(CostModelTest, PairwiseRankIgnoresScaleAcrossWorkloads) {
  Synthetic train = MakeSynthetic(400, 5);
  for (size_t i = 0; i < train.throughputs.size(); ++i) {
    if (train.keys[i] == "w1") train.throughputs[i] *= 100;
  }
  Synthetic test = MakeSynthetic(150, 6);
  CostModelOptions options = FastOptions();
  options.objective = Objective::kPairwiseRank;
  CostModel model(options);
  ASSERT_TRUE(model.Update(train.programs, train.throughputs, train.keys).ok());
  auto scores = model.Predict(test.programs);
  ASSERT_TRUE(scores.ok()) << scores.status();
  ExpectRanksEachWorkload(test, *scores);
}

// Models saved before the header named the aggregation (six fields) load and score by the
// mean of their rows, as they were trained.
TEST(CostModelTest, LegacyHeaderLoadsAsMeanOfRows) {
  CostModelOptions options = FastOptions();
  options.objective = Objective::kRowRegression;
  Synthetic s = MakeSynthetic(200, 7);
  CostModel model(options);
  ASSERT_TRUE(model.Update(s.programs, s.throughputs, s.keys).ok());
  auto bytes = model.Save();
  ASSERT_TRUE(bytes.ok());
  const size_t eol = bytes->find('\n');
  std::string header = bytes->substr(0, eol);
  ASSERT_EQ(header.substr(header.rfind(' ')), " mean");
  std::string legacy = header.substr(0, header.rfind(' ')) + bytes->substr(eol);
  auto loaded = CostModel::Load(legacy);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded->Predict(s.programs), *model.Predict(s.programs));
}

TEST(CostModelTest, NormalizesByTheBestOfEachWorkload) {
  std::vector<float> l = NormalizeByWorkload({1, 4, 2, 0, 0}, {"a", "a", "b", "b", "c"});
  EXPECT_EQ(l, (std::vector<float>{0.25f, 1.f, 1.f, 0.f, 0.f}));
  EXPECT_DOUBLE_EQ(PairwiseAccuracy({1, 2, 3}, {1, 2, 3}), 1.0);
  EXPECT_DOUBLE_EQ(PairwiseAccuracy({3, 2, 1}, {1, 2, 3}), 0.0);
}

TEST(CostModelTest, RetrainsWhenTheDataGrewByAFifth) {
  Synthetic s = MakeSynthetic(130, 3);
  auto part = [&](int lo, int hi, std::vector<FeatureMatrix>* p, std::vector<double>* t,
                  std::vector<std::string>* k) {
    p->assign(s.programs.begin() + lo, s.programs.begin() + hi);
    t->assign(s.throughputs.begin() + lo, s.throughputs.begin() + hi);
    k->assign(s.keys.begin() + lo, s.keys.begin() + hi);
  };
  std::vector<FeatureMatrix> p;
  std::vector<double> t;
  std::vector<std::string> k;
  CostModel model(FastOptions());
  part(0, 5, &p, &t, &k);
  ASSERT_TRUE(model.Update(p, t, k).ok());
  EXPECT_FALSE(model.trained()) << "below min_programs";
  EXPECT_EQ(model.Predict(p).status().code(), absl::StatusCode::kFailedPrecondition);
  part(5, 100, &p, &t, &k);
  ASSERT_TRUE(model.Update(p, t, k).ok());
  EXPECT_EQ(model.trained_on(), 100);
  part(100, 115, &p, &t, &k);
  ASSERT_TRUE(model.Update(p, t, k).ok());
  EXPECT_EQ(model.trained_on(), 100) << "15 % more data: no retraining";
  part(115, 130, &p, &t, &k);
  ASSERT_TRUE(model.Update(p, t, k).ok());
  EXPECT_EQ(model.trained_on(), 130);
}

TEST(CostModelTest, SaveLoadRoundTripPredictsIdentically) {
  CostModel model = TrainedModel();
  Synthetic probe = MakeSynthetic(50, 11);
  auto before = model.Predict(probe.programs);
  ASSERT_TRUE(before.ok()) << before.status();
  auto bytes = model.Save();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto loaded = CostModel::Load(*bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->trained());
  EXPECT_EQ(loaded->trained_on(), 200);
  auto after = loaded->Predict(probe.programs);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*before, *after);
  auto again = loaded->Save();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *bytes);
}

TEST(CostModelTest, CorruptBytesGiveAnErrorNotACrash) {
  CostModel model = TrainedModel();
  auto bytes = model.Save();
  ASSERT_TRUE(bytes.ok());
  const size_t body = bytes->find('\n') + 1;
  const std::string model_body = bytes->substr(body);
  // A header that matches `b` (size and checksum), so that XGBoost itself sees the body.
  auto with_header = [](const std::string& b) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : b) {
      h ^= static_cast<unsigned char>(c);
      h *= 0x100000001b3ull;
    }
    char hex[32];
    std::snprintf(hex, sizeof(hex), "%llx", static_cast<unsigned long long>(h));
    return "lathe-xgb " + std::to_string(kFeatureVersion) + " 164 5 " + std::to_string(b.size()) +
           " " + hex + "\n" + b;
  };
  std::string flipped = *bytes;
  flipped[body + model_body.size() / 2] ^= 0x5a;
  std::vector<std::string> bad = {
      "",
      "garbage",
      "lathe-xgb 1 164 5 0 0\n",
      "lathe-xgb 999 164 5 0 0\n" + model_body,
      "lathe-xgb 1 12 5 0 0\n" + model_body,
      bytes->substr(0, body + model_body.size() / 2),  // truncated
      flipped,
      with_header("{not a model"),
      with_header(std::string(1000, '\xff')),
      with_header(model_body.substr(0, model_body.size() / 2)),
  };
  for (const std::string& b : bad) {
    auto m = CostModel::Load(b);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << b.substr(0, 40);
    EXPECT_NE(m.status().message().find("cost model bytes"), std::string::npos) << m.status();
  }
  // XGBoost's own message comes through for a body it rejects.
  auto m = CostModel::Load(with_header("{not a model"));
  EXPECT_NE(m.status().message().find("xgboost"), std::string::npos) << m.status();
}

TEST(CostModelTest, BadInputsAreStatuses) {
  CostModel model(FastOptions());
  EXPECT_EQ(model.Save().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(model.Train().code(), absl::StatusCode::kFailedPrecondition);
  FeatureMatrix narrow;
  narrow.num_rows = 1;
  narrow.num_cols = 3;
  narrow.data = {1, 2, 3};
  EXPECT_EQ(model.Update({narrow}, {1.0}, {"w"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.Update({}, {1.0}, {}).code(), absl::StatusCode::kInvalidArgument);
  FeatureMatrix ok;
  ok.num_rows = 1;
  ok.data.assign(kNumFeatures, 1.f);
  EXPECT_EQ(model.Update({ok}, {-1.0}, {"w"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.Update({ok}, {NAN}, {"w"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.num_programs(), 0);

  CostModel trained = TrainedModel();
  EXPECT_EQ(trained.Predict({narrow}).status().code(), absl::StatusCode::kInvalidArgument);
  FeatureMatrix empty;
  auto s = trained.Predict({empty, ok});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)[0], 0.f) << "a program without stores";
}

// --- the database ---

class TempDb {
 public:
  TempDb() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "lathe_cm_test.XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    dir_ = made != nullptr ? made : "";
    auto db = db::Database::Open(dir_ + "/tuning.db");
    EXPECT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
  }
  ~TempDb() {
    db_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  db::Database& db() { return *db_; }

 private:
  std::string dir_;
  std::unique_ptr<db::Database> db_;
};

TEST(CostModelDatabaseTest, SaveAndLoadPerDeviceClass) {
  TempDb t;
  CostModel model = TrainedModel();
  ASSERT_TRUE(SaveToDatabase(t.db(), "cpu:test", model).ok());
  auto loaded = LoadFromDatabase(t.db(), "cpu:test");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Synthetic probe = MakeSynthetic(20, 5);
  EXPECT_EQ(*model.Predict(probe.programs), *loaded->Predict(probe.programs));
  EXPECT_EQ(LoadFromDatabase(t.db(), "cpu:other").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(SaveToDatabase(t.db(), "cpu:x", CostModel()).code(),
            absl::StatusCode::kFailedPrecondition);

  db::CostModelBlob stale;
  stale.device_class = "cpu:stale";
  stale.format = "lathe-xgb-ubj-f0";
  stale.model = "whatever";
  ASSERT_TRUE(t.db().PutCostModel(stale).ok());
  auto s = LoadFromDatabase(t.db(), "cpu:stale");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CostModelDatabaseTest, TrainsFromRecordsOfADeviceClass) {
  TempDb t;
  auto w = ir::MakeWorkload("matmul:m=32,n=32,k=32");
  ASSERT_TRUE(w.ok());
  std::mt19937_64 rng(3);
  int inserted = 0;
  const std::vector<int64_t> factors = {1, 2, 4, 8, 16};
  for (int i = 0; i < 24; ++i) {
    ir::Schedule sch(*w);
    int64_t fi = factors[rng() % factors.size()], fj = factors[rng() % factors.size()];
    ASSERT_TRUE(sch.Split("C", "i", {fi}).ok());
    ASSERT_TRUE(sch.Split("C", "j", {fj}).ok());
    if (rng() % 2) {
      ASSERT_TRUE(sch.Vectorize("C", "j.1").ok());
    }
    db::Record r;
    r.candidate_id = "c" + std::to_string(i);
    r.workload = w->canonical;
    r.workload_key = w->key;
    r.device_class = i % 4 == 3 ? "cpu:other" : "cpu:test";
    r.trace_json = traceio::TraceToJson(sch.trace());
    r.median_us = 10.0 + static_cast<double>(fi * 3 + fj);
    ASSERT_TRUE(t.db().Insert(r).ok());
    inserted += r.device_class == "cpu:test";
  }
  db::Record broken;
  broken.candidate_id = "broken";
  broken.workload = w->canonical;
  broken.workload_key = w->key;
  broken.device_class = "cpu:test";
  broken.trace_json = "{not json";
  broken.median_us = 5;
  ASSERT_TRUE(t.db().Insert(broken).ok());

  CostModel model(FastOptions());
  auto stats = TrainFromDatabase(t.db(), "cpu:test", model);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->records, inserted + 1);
  EXPECT_EQ(stats->used, inserted);
  EXPECT_EQ(stats->skipped, 1);
  EXPECT_TRUE(model.trained());

  EXPECT_EQ(stats->lowered, inserted) << "no features were stored: every trace was lowered";

  // The features lowered by the first training were stored: the next one lowers nothing, and
  // they are the ones lowering gives.
  CostModel again(FastOptions());
  stats = TrainFromDatabase(t.db(), "cpu:test", again);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->used, inserted);
  EXPECT_EQ(stats->lowered, 0);
  absl::StatusOr<std::optional<db::Record>> r0 = t.db().GetByCandidateId("c0");
  ASSERT_TRUE(r0.ok() && r0->has_value());
  int64_t lowered = -1;
  std::vector<std::optional<FeatureMatrix>> stored = FeaturesOfRecords(t.db(), {**r0}, &lowered);
  EXPECT_EQ(lowered, 0);
  ASSERT_TRUE(stored[0].has_value());
  absl::StatusOr<ir::LoweredFunc> f = LowerRecordTrace((*r0)->trace_json, (*r0)->device_class);
  ASSERT_TRUE(f.ok());
  absl::StatusOr<FeatureMatrix> fresh = ExtractFeatures(*f);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(stored[0]->num_rows, fresh->num_rows);
  EXPECT_EQ(stored[0]->data, fresh->data);

  CostModel empty(FastOptions());
  EXPECT_EQ(TrainFromDatabase(t.db(), "cpu:none", empty).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace lathe::cost_model
