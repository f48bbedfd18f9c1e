// The evolutionary search: a round is deterministic for a seed whatever the thread count,
// and the programs it lowers and featurizes to rank candidates stay what they were (the
// search's speed-ups must not change what it computes).
#include "tuner/search.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codegen/lower.h"
#include "cost_model/features.h"
#include "cost_model/xgb_model.h"
#include "ir/printer.h"
#include "ir/workload.h"
#include "tests/tuner/test_targets.h"
#include "tuner/space.h"

namespace lathe::tuner {
namespace {

// FNV-1a over bytes, chained.
uint64_t Fnv(const void* p, size_t n, uint64_t h) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= c[i];
    h *= 1099511628211ull;
  }
  return h;
}

// Lowers 24 sampled candidates of `spec` and a mutation of each (fixed seed and target) and
// hashes the printed programs and their feature bytes; {0, 0} on any failure.
std::pair<uint64_t, uint64_t> LoweringDigest(const std::string& spec) {
  uint64_t text = 1469598103934665603ull, feats = text;
  auto w = ir::MakeWorkload(spec);
  if (!w.ok()) return {0, 0};
  auto space = SearchSpace::Create(*w, Avx2TwoCores());
  if (!space.ok()) return {0, 0};
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 24; ++i) {
    auto c = (*space)->Sample(rng);
    if (!c.ok()) return {0, 0};
    auto m = (*space)->Mutate(*c, rng);
    if (!m.ok()) return {0, 0};
    for (const Candidate* x : {&*c, &*m}) {
      auto f = codegen::Lower(*x->schedule, "candidate");
      if (!f.ok()) return {0, 0};
      const std::string t = ir::ToText(*f);
      text = Fnv(t.data(), t.size(), text);
      auto fm = cost_model::ExtractFeatures(*f);
      if (!fm.ok()) return {0, 0};
      feats = Fnv(fm->data.data(), fm->data.size() * sizeof(float), feats);
    }
  }
  return {text, feats};
}

struct Golden {
  const char* spec;
  uint64_t text, features;
};

// Recorded before the lowering, simplifier and feature speed-ups of the search round (the
// lowered text and feature bytes of these 48 programs per workload were identical after).
// A deliberate change of lowering or features changes them: check that the change is meant
// (the cost model's features then mean something else) and record the new values.
TEST(SearchLoweringTest, ProgramsAndFeaturesOfSampledCandidatesAreUnchanged) {
  const Golden golden[] = {
      // Re-recorded when Lower() became the whole CPU recipe (feature layout version 2), then
      // when loop versioning began to copy tile loops for guards under vectorized loops
      // (column tails were lane masks before). The two matmuls and the depthwise conv again
      // when the simplifier learned c*(y/c) + y%c == y (a fused loop's index put back
      // together: C[i+j] where it was C[(i+j/3)*3 + (i+j % 3)]). The conv again when its
      // space grew (session 20): column tiles of micro-kernel rows (3, 5, 6) where the channels
      // are the vector, and the channels mode 2 (input channels unrolled innermost), so the
      // samples drawn from it differ. Again when the weight copy of its channel-vector tiles
      // came to walk the output channels just inside the input channels (session 25). Both
      // convs again when inlined padding's products became guards (codegen/zero_taps.h) and
      // loop versioning began to peel border tiles (session 27). The depthwise conv again when
      // tiles of channels that share no input came to unroll the window's rows (session 28); the
      // dense conv again when its weight copy became transposed tiles, then one block of channels
      // at a time (session 28). Both convs again when an innermost reduce loop that unroll_k does
      // not divide and that is at most twice it came to be unrolled whole (session 29). The
      // depthwise conv again when its space offered vectors of channels (session 29), and when
      // loop versioning came to version the two peeled border copies of a loop without
      // iterations between them further (session 32). The matmul with an epilogue and the
      // depthwise conv again when a fused epilogue's accumulator ending in a partial vector
      // came to be stored locally (its tile's guards lane masks, session 32).
      {"conv2d:n=1,c=32,h=14,w=14,k=32,r=3,s=3,pad=1", 0xa8b6e332eab843ddull,
       0x98b6037ca65852f6ull},
      {"matmul:m=128,n=96,k=64", 0x7ab5fd0471788903ull, 0x0b7ee51bb7c1d060ull},
      {"matmul:m=37,n=50,k=23,epilogue=bias_relu", 0x94a7459be55cceb6ull, 0xb8bf1cb11ed4b258ull},
      {"conv2d:n=1,c=8,h=9,w=9,k=8,r=3,s=3,pad=1,groups=8,epilogue=bias", 0x2b8c77566e287662ull,
       0xec956adf11a19912ull},
      // Softmax re-recorded when the rfactor partial results came to be stored rows outer, then
      // when they came to be computed per row tile with their statistic (session 11).
      {"softmax:m=1,n=300", 0x76fe2d09e73b61d7ull, 0x84be7e6e78e8e96full},
  };

  for (const Golden& g : golden) {
    auto [text, features] = LoweringDigest(g.spec);
    EXPECT_EQ(text, g.text) << g.spec << ": lowered programs changed";
    EXPECT_EQ(features, g.features) << g.spec << ": features changed";
  }
}

// A model trained on sampled programs of `space` with a made-up throughput (so that the
// ranking is not flat).
cost_model::CostModel TrainOnSamples(const SearchSpace& space) {
  cost_model::CostModelOptions options;
  options.max_rounds = 20;
  options.nthread = 1;
  cost_model::CostModel model(options);
  std::mt19937_64 rng(5);
  std::vector<cost_model::FeatureMatrix> x;
  std::vector<double> y;
  std::vector<std::string> keys;
  for (int i = 0; i < 60; ++i) {
    auto c = space.Sample(rng);
    if (!c.ok()) continue;
    auto f = codegen::Lower(*c->schedule, "candidate");
    if (!f.ok()) continue;
    auto m = cost_model::ExtractFeatures(*f);
    if (!m.ok()) continue;
    double sum = 0;
    for (int64_t d : c->decisions) sum += static_cast<double>(d % 7);
    x.push_back(std::move(*m));
    y.push_back(1.0 + sum);
    keys.push_back(space.workload().key);
  }
  EXPECT_TRUE(model.Update(x, y, keys).ok());
  if (!model.trained()) {
    EXPECT_TRUE(model.Train().ok());
  }
  return model;
}

std::vector<ir::ProgramId> Keys(const std::vector<Candidate>& batch) {
  std::vector<ir::ProgramId> out;
  for (const Candidate& c : batch) out.push_back(ProgramOf(c));
  return out;
}

TEST(SearchTest, RoundIsDeterministicWhateverTheThreadCount) {
  auto w = ir::MakeWorkload("matmul:m=64,n=48,k=32");
  ASSERT_TRUE(w.ok()) << w.status();
  auto space = SearchSpace::Create(*w, Avx2TwoCores());
  ASSERT_TRUE(space.ok()) << space.status();
  cost_model::CostModel model = TrainOnSamples(**space);
  ASSERT_TRUE(model.trained());
  std::mt19937_64 seed_rng(9);
  std::vector<Candidate> seeds;
  ProgramSet measured;
  for (int i = 0; i < 4; ++i) {
    auto c = (*space)->Sample(seed_rng);
    ASSERT_TRUE(c.ok()) << c.status();
    measured.insert(ProgramOf(*c));
    seeds.push_back(std::move(*c));
  }
  SearchOptions options;
  options.population = 128;
  options.generations = 2;
  std::vector<std::vector<ir::ProgramId>> runs;
  for (int threads : {1, 2, 3}) {
    options.threads = threads;
    std::mt19937_64 rng(17);
    SearchStats stats;
    auto batch = NextBatch(**space, model, seeds, measured, 16, options, rng, &stats);
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->size(), 16u);
    EXPECT_GT(stats.scored, 0);
    for (const Candidate& c : *batch) {
      EXPECT_FALSE(measured.contains(ProgramOf(c))) << "a measured candidate came back";
    }
    runs.push_back(Keys(*batch));
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

}  // namespace
}  // namespace lathe::tuner
