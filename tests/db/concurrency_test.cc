// Several writer and reader threads on one file, each with its own connection (plus one
// shared connection): no SQLITE_BUSY, no error of any kind, reaches the caller.

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "db/database.h"
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

TEST(ConcurrencyTest, WritersAndReadersNeverSeeBusy) {
  TempDir dir;
  std::string path = dir.File("t.db");
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
      while (writers_done.load() < kWriters) {
        failures.Check(db.value()->Best("key-1", kCpu).status(), "best");
        failures.Check(db.value()->TopK("key-2", kCpu, 10).status(), "topk");
        failures.Check(db.value()->MeasuredTraces("key-0", kCpu).status(), "measured");
        failures.Check(db.value()->GetStats().status(), "stats");
        ++reads;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.count(), 0) << failures.first();
  EXPECT_GT(reads.load(), 0);

  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_EQ((*db)->GetStats()->records, kWriters * kBatches * kPerBatch);
  EXPECT_TRUE((*db)->IntegrityCheck()->empty());
}

TEST(ConcurrencyTest, OneConnectionSharedByThreads) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(dir.File("t.db"));
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

}  // namespace
}  // namespace lathe::db
