// Tests of the per-store features of lowered programs.
#include "cost_model/features.h"

#include <cmath>
#include <set>
#include <string>

#include "codegen/lower.h"
#include "gtest/gtest.h"
#include "ir/schedule.h"
#include "ir/workload.h"

namespace lathe::cost_model {
namespace {

ir::Workload Matmul(int m, int n, int k) {
  auto w = ir::MakeWorkload("matmul:m=" + std::to_string(m) + ",n=" + std::to_string(n) +
                            ",k=" + std::to_string(k));
  EXPECT_TRUE(w.ok()) << w.status();
  return *w;
}

FeatureMatrix Features(const ir::Schedule& sch) {
  auto f = codegen::Lower(sch, "kernel");
  EXPECT_TRUE(f.ok()) << f.status();
  auto m = ExtractFeatures(*f);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

ir::Schedule Optimized(const ir::Workload& w) {
  ir::Schedule sch(w);
  EXPECT_TRUE(sch.CacheWrite("C", "local").ok());
  EXPECT_TRUE(sch.Split("C", "i", {8}).ok());
  EXPECT_TRUE(sch.Split("C", "j", {16}).ok());
  EXPECT_TRUE(sch.Reorder("C", {"i.0", "j.0", "i.1", "j.1"}).ok());
  EXPECT_TRUE(sch.Fuse("C", {"i.0", "j.0"}).ok());
  EXPECT_TRUE(sch.Parallel("C", "i.0+j.0").ok());
  EXPECT_TRUE(sch.ComputeAt("C.local", "C", "i.0+j.0").ok());
  EXPECT_TRUE(sch.Vectorize("C", "j.1").ok());
  return sch;
}

float Max(const FeatureMatrix& m, int col) {
  float v = 0;
  for (int r = 0; r < m.num_rows; ++r) v = std::max(v, m.row(r)[col]);
  return v;
}

TEST(FeaturesTest, NamesCoverTheDocumentedLayout) {
  const auto& names = FeatureNames();
  ASSERT_EQ(names.size(), static_cast<size_t>(kNumFeatures));
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  EXPECT_EQ(names[kOffsetFloatOps], "float_addsub");
  EXPECT_EQ(names[kOffsetVectorize], "vec.num");
  EXPECT_EQ(names[kOffsetParallel], "parallel.num");
  EXPECT_EQ(names[kOffsetGpu + 4], "gpu.threadIdx.x");
  EXPECT_EQ(names[kOffsetBuffers], "buf0.read");
  EXPECT_EQ(names[kOffsetAlloc], "alloc.size");
  EXPECT_EQ(names[kOffsetIntensity + 9], "intensity.9");
}

TEST(FeaturesTest, NaiveMatmulHasOneFiniteRowPerStore) {
  ir::Schedule sch(Matmul(64, 64, 64));
  FeatureMatrix m = Features(sch);
  EXPECT_EQ(m.num_cols, kNumFeatures);
  EXPECT_EQ(m.num_rows, 2) << "init and update of C";
  ASSERT_EQ(m.data.size(), static_cast<size_t>(m.num_rows) * kNumFeatures);
  for (float v : m.data) {
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_GE(v, 0.f);
  }
  // The update row: 64^3 float adds and muls, log2-scaled.
  EXPECT_NEAR(m.row(1)[kOffsetFloatOps], std::log2(1.0 + 64.0 * 64 * 64), 1e-3);
  EXPECT_NEAR(m.row(1)[kOffsetFloatOps + 1], std::log2(1.0 + 64.0 * 64 * 64), 1e-3);
  EXPECT_EQ(m.row(1)[kOffsetLoopNest], std::log2(4.f)) << "three loops";
  EXPECT_EQ(Max(m, kOffsetVectorize), 0.f);
  EXPECT_EQ(Max(m, kOffsetParallel), 0.f);
  EXPECT_EQ(m.row(1)[kOffsetVectorize + 3], 1.f) << "vectorize position: none";
  // The update reads A, B and C and writes C: three buffers; the 4th and 5th are empty.
  for (int b = 0; b < 3; ++b) {
    EXPECT_GT(m.row(1)[kOffsetBuffers + b * kNumBufferFeatures + 3], 0.f) << "bytes of " << b;
  }
  for (int c = kOffsetBuffers + 3 * kNumBufferFeatures; c < kOffsetAlloc; ++c) {
    EXPECT_EQ(m.row(1)[c], 0.f) << FeatureNames()[c];
  }
}

TEST(FeaturesTest, AreDeterministic) {
  ir::Workload w = Matmul(48, 40, 24);
  FeatureMatrix a = Features(Optimized(w));
  FeatureMatrix b = Features(Optimized(w));
  EXPECT_EQ(a.num_rows, b.num_rows);
  EXPECT_EQ(a.data, b.data);
}

TEST(FeaturesTest, OptimizedScheduleDiffersFromNaive) {
  ir::Workload w = Matmul(64, 64, 64);
  FeatureMatrix naive = Features(ir::Schedule(w));
  FeatureMatrix opt = Features(Optimized(w));
  EXPECT_NE(naive.data, opt.data);
  EXPECT_GT(opt.num_rows, naive.num_rows) << "the local accumulator adds a copy-out store";
  EXPECT_GT(Max(opt, kOffsetVectorize), 0.f);
  EXPECT_GT(Max(opt, kOffsetParallel), 0.f);
  EXPECT_GT(Max(opt, kOffsetAlloc), 0.f) << "C.local is allocated";
  EXPECT_GT(Max(opt, kOffsetAlloc + 3), 0.f) << "in local scope";
  for (float v : opt.data) EXPECT_TRUE(std::isfinite(v));
}

// Counts the buffers of the update row whose innermost moving stride is 1, and those whose
// stride is 32 (a row of B).
std::pair<int, int> ContiguousAndRowStrided(const ir::Schedule& sch) {
  FeatureMatrix m = Features(sch);
  int contiguous = 0, row_strided = 0;
  for (int b = 0; b < 3; ++b) {
    const float* f = m.row(1) + kOffsetBuffers + b * kNumBufferFeatures;
    contiguous += f[18] > 0;
    row_strided += f[17] == std::log2(33.f);
  }
  return {contiguous, row_strided};
}

TEST(FeaturesTest, StrideOfTheInnermostMovingLoop) {
  ir::Schedule ijk(Matmul(32, 32, 32));
  // k innermost: A[i,k] moves by 1, B[k,j] by a row, C[i,j] not at all (j moves it by 1).
  EXPECT_EQ(ContiguousAndRowStrided(ijk), std::make_pair(2, 1));
  ir::Schedule ikj(Matmul(32, 32, 32));
  ASSERT_TRUE(ikj.Reorder("C", {"i", "k", "j"}).ok());
  // j innermost: B and C move by 1; A not at all (k moves it by 1).
  EXPECT_EQ(ContiguousAndRowStrided(ikj), std::make_pair(3, 0));
}

// The features read the program the backend compiles (Lower()'s CPU recipe): a vectorized
// loop has become vectors, counted as an innermost vectorized loop of their lanes, with the
// same float operations as the loop it was.
TEST(FeaturesTest, VectorLanesCountAsTheVectorizedLoop) {
  ir::Schedule sch(Matmul(16, 32, 8));
  ASSERT_TRUE(sch.Split("C", "j", {8}).ok());
  ASSERT_TRUE(sch.Vectorize("C", "j.1").ok());
  auto lower = [&](const codegen::LowerOptions& o) {
    auto f = codegen::Lower(sch, "kernel", o);
    EXPECT_TRUE(f.ok()) << f.status();
    auto m = ExtractFeatures(*f);
    EXPECT_TRUE(m.ok()) << m.status();
    return *m;
  };
  const FeatureMatrix vec = lower({});
  const FeatureMatrix loop = lower(codegen::LowerOptions::StructuralOnly());
  ASSERT_EQ(vec.num_rows, loop.num_rows);
  for (int r = 0; r < vec.num_rows; ++r) {
    EXPECT_EQ(vec.row(r)[kOffsetVectorize], 1.f) << "one vectorized loop, row " << r;
    EXPECT_EQ(vec.row(r)[kOffsetVectorize + 2], std::log2(9.f)) << "of 8 lanes, row " << r;
    EXPECT_EQ(vec.row(r)[kOffsetVectorize + 4], 1.f) << "innermost, row " << r;
    // Multiplies and adds: the same counts whether a loop or lanes carry them.
    EXPECT_FLOAT_EQ(vec.row(r)[kOffsetFloatOps], loop.row(r)[kOffsetFloatOps]) << r;
    EXPECT_FLOAT_EQ(vec.row(r)[kOffsetFloatOps + 1], loop.row(r)[kOffsetFloatOps + 1]) << r;
    EXPECT_FLOAT_EQ(vec.row(r)[kOffsetLoopNest],
                    std::log2(std::exp2(loop.row(r)[kOffsetLoopNest]) - 1))
        << "one loop fewer, row " << r;
  }
}

// A versioned loop (Lower()'s partition pass) holds a guard-free copy and the guarded
// original under one condition: each counts for the iterations it runs, so the versioned
// program's multiply-adds sum to the unversioned one's instead of doubling.
TEST(FeaturesTest, VersionedCopiesSplitTheIterations) {
  ir::Schedule sch(Matmul(10, 16, 8));
  ASSERT_TRUE(sch.CacheWrite("C", "local").ok());
  ASSERT_TRUE(sch.Split("C", "i", {4}).ok());
  ASSERT_TRUE(sch.Split("C", "j", {8}).ok());
  ASSERT_TRUE(sch.Reorder("C", {"j.0", "i.0", "i.1", "j.1"}).ok());
  ASSERT_TRUE(sch.ComputeAt("C.local", "C", "i.0").ok());
  ASSERT_TRUE(sch.Reorder("C.local", {"k", "i", "j"}).ok());
  ASSERT_TRUE(sch.Vectorize("C.local", "j").ok());
  codegen::LowerOptions unversioned;
  unversioned.partition = false;
  auto total_muls = [&](const codegen::LowerOptions& o, int* rows) {
    auto f = codegen::Lower(sch, "kernel", o);
    EXPECT_TRUE(f.ok()) << f.status();
    auto m = ExtractFeatures(*f);
    EXPECT_TRUE(m.ok()) << m.status();
    double sum = 0;
    for (int r = 0; r < m->num_rows; ++r) sum += std::exp2(m->row(r)[kOffsetFloatOps + 1]) - 1;
    *rows = m->num_rows;
    return sum;
  };
  int rows_versioned = 0, rows_plain = 0;
  const double versioned = total_muls({}, &rows_versioned);
  const double plain = total_muls(unversioned, &rows_plain);
  EXPECT_GT(rows_versioned, rows_plain) << "the versioned copy adds stores";
  EXPECT_NEAR(versioned, plain, plain * 1e-3);
  // A 10 x 16 x 8 matmul does 1280 multiplies: the guard of the tile rows past m = 10 holds
  // on 10 of the 12 rows the tiles cover, and its body counts for those.
  EXPECT_NEAR(plain, 1280, 1);
}

TEST(FeaturesTest, EmptyFunctionIsAnError) {
  ir::LoweredFunc f;
  f.name = "empty";
  auto m = ExtractFeatures(f);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lathe::cost_model
