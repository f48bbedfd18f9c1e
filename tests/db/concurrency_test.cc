// Several writer and reader threads on one store (a SQLite file, a PostgreSQL database), each
// with its own connection (plus one shared connection): no SQLITE_BUSY, no lock or
// serialization error, no error of any kind, reaches the caller.

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "db/database.h"
#include "tests/db/store_param.h"
#include "tests/db/test_util.h"

namespace lathe::db {
namespace {

using testing::MakeRecord;
using testing::TempDir;

constexpr char kCpu[] = "cpu:Test CPU:avx512:2c";

class Failures {
 public:
  void Check(const absl::Status& st, const char* what) {
    if (st.ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (count_++ == 0) first_ = std::string(what) + ": " + std::string(st.message());
  }
  int count() const { return count_; }
  const std::string& first() const { return first_; }

 private:
  std::mutex mu_;
  int count_ = 0;
  std::string first_;
};

class ConcurrencyTest : public testing::StoreTest {};
LATHE_INSTANTIATE_STORE_TEST(ConcurrencyTest);

TEST_P(ConcurrencyTest, WritersAndReadersNeverSeeBusy) {
  std::string path = Location();
  constexpr int kWriters = 4, kBatches = 20, kPerBatch = 16, kReaders = 3;
  Failures failures;
  std::atomic<int> writers_done{0};
  std::atomic<int64_t> reads{0};

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      // Every thread opens the (not yet existing) file at once: creation races too.
      absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path);
      failures.Check(db.status(), "open writer");
      if (db.ok()) {
        for (int b = 0; b < kBatches; ++b) {
          std::vector<Record> batch;
          for (int i = 0; i < kPerBatch; ++i) {
            std::string id =
                "w" + std::to_string(w) + "-" + std::to_string(b) + "-" + std::to_string(i);
            batch.push_back(MakeRecord(id, std::to_string(b % 3), kCpu, 1 + (i * 7 + w) % 50));
          }
          failures.Check(db.value()->InsertBatch(batch).status(), "insert");
        }
      }
      ++writers_done;
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&] {
      absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path);
      failures.Check(db.status(), "open reader");
      if (!db.ok()) return;
      // At least one pass: on a loaded machine the writers may be done before a reader has
      // opened its connection.
      do {
        failures.Check(db.value()->Best("key-1", kCpu).status(), "best");
        failures.Check(db.value()->TopK("key-2", kCpu, 10).status(), "topk");
        failures.Check(db.value()->MeasuredTraces("key-0", kCpu).status(), "measured");
        failures.Check(db.value()->GetStats().status(), "stats");
        ++reads;
      } while (writers_done.load() < kWriters);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.count(), 0) << failures.first();
  EXPECT_GE(reads.load(), kReaders);

  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_EQ((*db)->GetStats()->records, kWriters * kBatches * kPerBatch);
  EXPECT_TRUE((*db)->IntegrityCheck()->empty());
}

TEST_P(ConcurrencyTest, OneConnectionSharedByThreads) {
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(Location());
  ASSERT_TRUE(db.ok()) << db.status();
  Database& shared = **db;
  Failures failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
        failures.Check(shared.Insert(MakeRecord(id, "1", kCpu, 1 + i)).status(), "insert");
        failures.Check(shared.Best("key-1", kCpu).status(), "best");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.count(), 0) << failures.first();
  EXPECT_EQ(shared.GetStats()->records, 200);
}

// Concurrent InsertBatch calls on one shared Database that queue up behind a commit share the
// next transaction (group commit); each batch stays all or nothing and gets its own result.
// On SQLite another connection holds the write lock for a moment so that the batches do queue
// up; on PostgreSQL they queue behind each other's commits.
TEST_P(ConcurrencyTest, GroupCommitKeepsEveryBatchAllOrNothing) {
  const std::string path = Location();
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  Database& shared = **db;
  ASSERT_TRUE(shared.Insert(MakeRecord("seed", "0", kCpu, 10)).ok());

  sqlite3* holder = nullptr;
  if (!IsPostgres()) {
    ASSERT_EQ(sqlite3_open(path.c_str(), &holder), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  }

  constexpr int kBatches = 8, kPerBatch = 4, kBad = 3;
  auto id = [](int b, int i) { return "b" + std::to_string(b) + "-" + std::to_string(i); };
  std::vector<absl::StatusOr<std::vector<InsertResult>>> results(kBatches);
  std::vector<std::thread> threads;
  for (int b = 0; b < kBatches; ++b) {
    threads.emplace_back([&, b] {
      std::vector<Record> batch;
      for (int i = 0; i < kPerBatch; ++i) batch.push_back(MakeRecord(id(b, i), "1", kCpu, 5 + i));
      // Batch kBad's third record names workload key-0 with another spec: the database
      // refuses it after the first two rows of the batch were written.
      if (b == kBad) batch[2].workload_key = "key-0";
      // Batch 7 repeats a candidate of batch 6: whichever commits second sees a duplicate.
      if (b == 7) batch[0].candidate_id = id(6, 0);
      results[b] = shared.InsertBatch(batch);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (holder != nullptr) {
    ASSERT_EQ(sqlite3_exec(holder, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  }
  for (std::thread& t : threads) t.join();
  if (holder != nullptr) sqlite3_close(holder);

  EXPECT_TRUE(absl::IsInvalidArgument(results[kBad].status())) << results[kBad].status();
  for (int i = 0; i < kPerBatch; ++i) {
    absl::StatusOr<std::optional<Record>> got = shared.GetByCandidateId(id(kBad, i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_FALSE(got->has_value()) << id(kBad, i) << " of the refused batch was stored";
  }
  int inserted = 0;
  for (int b = 0; b < kBatches; ++b) {
    if (b == kBad) continue;
    ASSERT_TRUE(results[b].ok()) << "batch " << b << ": " << results[b].status();
    ASSERT_EQ(results[b]->size(), static_cast<size_t>(kPerBatch));
    for (const InsertResult& r : *results[b]) inserted += r.inserted ? 1 : 0;
  }
  // 7 batches of 4, one candidate of them sent twice.
  EXPECT_EQ(inserted, 7 * kPerBatch - 1);
  EXPECT_NE((*results[6])[0].inserted, (*results[7])[0].inserted);
  EXPECT_EQ((*results[6])[0].id, (*results[7])[0].id);
  EXPECT_EQ(shared.GetStats()->records, 1 + 7 * kPerBatch - 1);
  EXPECT_TRUE(shared.IntegrityCheck()->empty());
}

}  // namespace
}  // namespace lathe::db
