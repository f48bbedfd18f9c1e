#include "db/lookup.h"

#include <gtest/gtest.h>

#include "tests/db/test_util.h"

namespace lathe::db {
namespace {

using testing::MakeRecord;
using testing::TempDir;

constexpr char kModel[] = "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz";
std::string Cpu(const std::string& isa, int cores) {
  return std::string("cpu:") + kModel + ":" + isa + ":" + std::to_string(cores) + "c";
}

const WorkloadRef kW1{"matmul:k=1,m=64,n=64", "key-1"};

TEST(ParseCpuDeviceClassTest, Parts) {
  std::optional<CpuDeviceClass> p = ParseCpuDeviceClass(Cpu("avx512", 16));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->model, kModel);
  EXPECT_EQ(p->isa, "avx512");
  EXPECT_EQ(p->cores, 16);
  p = ParseCpuDeviceClass("cpu:Weird:Model:With:Colons:neon:4c");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->model, "Weird:Model:With:Colons");
  EXPECT_FALSE(ParseCpuDeviceClass("cuda:NVIDIA H100:sm_90").has_value());
  EXPECT_FALSE(ParseCpuDeviceClass("cpu:x:avx2:c").has_value());
  EXPECT_FALSE(ParseCpuDeviceClass("cpu:x:avx2:0c").has_value());
  EXPECT_FALSE(ParseCpuDeviceClass("cpu:avx2:4c").has_value());
}

class LookupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(dir_.File("t.db"));
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
  }
  TempDir dir_;
  std::unique_ptr<Database> db_;
};

TEST_F(LookupTest, ExactHit) {
  ASSERT_TRUE(db_->Insert(MakeRecord("a", "1", Cpu("avx512", 2), 9)).ok());
  ASSERT_TRUE(db_->Insert(MakeRecord("b", "1", Cpu("avx512", 2), 4)).ok());
  ASSERT_TRUE(db_->Insert(MakeRecord("c", "1", Cpu("avx512", 4), 1)).ok());
  absl::StatusOr<LookupResult> r = Lookup(*db_, kW1, Cpu("avx512", 2));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->match, MatchKind::kExact);
  ASSERT_TRUE(r->record.has_value());
  EXPECT_EQ(r->record->candidate_id, "b");
  EXPECT_EQ(r->device_class, Cpu("avx512", 2));
  EXPECT_NE(r->explanation.find("best ok record for matmul:k=1,m=64,n=64 on " + Cpu("avx512", 2) +
                                ": record b (median 4.000 us"),
            std::string::npos)
      << r->explanation;
}

TEST_F(LookupTest, ExactOnlyPolicyExplainsTheMiss) {
  ASSERT_TRUE(db_->Insert(MakeRecord("c", "1", Cpu("avx512", 4), 1)).ok());
  ASSERT_TRUE(db_->Insert(MakeRecord("d", "1", Cpu("avx2", 2), 1)).ok());
  absl::StatusOr<LookupResult> r = Lookup(*db_, kW1, Cpu("avx512", 2));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->match, MatchKind::kMiss);
  EXPECT_FALSE(r->record.has_value());
  EXPECT_NE(r->explanation.find(Cpu("avx512", 4) + " (1 ok records: same cpu model and isa"),
            std::string::npos)
      << r->explanation;
  EXPECT_NE(r->explanation.find("policy requires the exact class"), std::string::npos);
  EXPECT_NE(r->explanation.find(Cpu("avx2", 2) + " (1 ok records: different device model or isa"),
            std::string::npos)
      << r->explanation;
}

TEST_F(LookupTest, OtherCoreCountPolicySaysWhichRecordAndWhy) {
  ASSERT_TRUE(db_->Insert(MakeRecord("c8", "1", Cpu("avx512", 8), 1)).ok());
  ASSERT_TRUE(db_->Insert(MakeRecord("c4", "1", Cpu("avx512", 4), 3)).ok());
  ASSERT_TRUE(db_->Insert(MakeRecord("c4b", "1", Cpu("avx512", 4), 2)).ok());
  ASSERT_TRUE(db_->Insert(MakeRecord("x", "1", Cpu("avx2", 2), 0.5)).ok());  // other ISA
  LookupPolicy policy{DeviceFallback::kOtherCoreCount};
  absl::StatusOr<LookupResult> r = Lookup(*db_, kW1, Cpu("avx512", 2), policy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->match, MatchKind::kOtherCoreCount);
  ASSERT_TRUE(r->record.has_value());
  EXPECT_EQ(r->record->candidate_id, "c4b");  // nearest core count, then fastest
  EXPECT_EQ(r->device_class, Cpu("avx512", 4));
  EXPECT_NE(r->explanation.find("used record c4b"), std::string::npos) << r->explanation;
  EXPECT_NE(r->explanation.find("4 cores instead of 2"), std::string::npos) << r->explanation;
  EXPECT_NE(r->explanation.find("policy allows another core count"), std::string::npos);

  // An exact record always wins over a compatible one.
  ASSERT_TRUE(db_->Insert(MakeRecord("exact", "1", Cpu("avx512", 2), 50)).ok());
  r = Lookup(*db_, kW1, Cpu("avx512", 2), policy);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->match, MatchKind::kExact);
  EXPECT_EQ(r->record->candidate_id, "exact");
}

TEST_F(LookupTest, OnlyFailedRecordsIsAMiss) {
  ASSERT_TRUE(db_->Insert(MakeRecord("t", "1", Cpu("avx512", 2), 0, ErrorClass::kTimeout)).ok());
  absl::StatusOr<LookupResult> r =
      Lookup(*db_, kW1, Cpu("avx512", 2), {DeviceFallback::kOtherCoreCount});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->match, MatchKind::kMiss);
  EXPECT_NE(r->explanation.find("no other device class has one"), std::string::npos)
      << r->explanation;
}

TEST_F(LookupTest, UnknownWorkloadAndKeyMismatch) {
  absl::StatusOr<LookupResult> r = Lookup(*db_, kW1, Cpu("avx512", 2));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->match, MatchKind::kMiss);
  EXPECT_NE(r->explanation.find("no records for workload matmul:k=1,m=64,n=64"), std::string::npos);
  ASSERT_TRUE(db_->Insert(MakeRecord("a", "1", Cpu("avx512", 2), 1)).ok());
  r = Lookup(*db_, WorkloadRef{"matmul:k=2,m=64,n=64", "key-1"}, Cpu("avx512", 2));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->match, MatchKind::kMiss);
  EXPECT_FALSE(r->record.has_value());
  EXPECT_NE(r->explanation.find("belongs to"), std::string::npos) << r->explanation;
}

}  // namespace
}  // namespace lathe::db
