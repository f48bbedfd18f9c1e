// Matmuls whose innermost axis is longer than 1024 (BERT's FFN, n=3072; PP-OCR rec's
// classifier, n=6625) keep a vector accumulator in the rule-picked and sampled candidates: the
// accumulator's column loop is split by its tile before it is vectorized (its nominal extent,
// the full axis, is past Schedule::Vectorize's limit).
#include <random>

#include "gtest/gtest.h"
#include "ir/trace.h"
#include "test_targets.h"
#include "tuner/space.h"

namespace lathe::tuner {
namespace {

bool VectorizesAccumulator(const ir::Trace& t) {
  for (const ir::Instruction& i : t.instructions) {
    const bool acc = i.stage == "matmul" || i.stage.find(".local") != std::string::npos;
    if (i.kind == "vectorize" && acc) return true;
  }
  return false;
}

TEST(SpaceWideTest, AccumulatorOfAWideMatmulIsVectorized) {
  for (const char* spec : {"matmul:m=128,n=3072,k=768,epilogue=bias", "matmul:m=40,n=6625,k=120"}) {
    SCOPED_TRACE(spec);
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(spec);
    ASSERT_TRUE(w.ok());
    auto space = SearchSpace::Create(*w, Avx2TwoCores());
    ASSERT_TRUE(space.ok()) << space.status();
    std::vector<Candidate> picks = (*space)->Heuristic(1);
    ASSERT_EQ(picks.size(), 1u);
    EXPECT_TRUE(VectorizesAccumulator(picks[0].trace)) << ir::TraceToText(picks[0].trace);
  }
}

}  // namespace
}  // namespace lathe::tuner
