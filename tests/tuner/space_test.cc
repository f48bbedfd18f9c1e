// The CPU search space: every sampled or mutated candidate of every op is a valid schedule
// that builds and agrees with the reference; candidates round-trip through their traces; the
// rfactor, channel-vector, chunk and pair choices. The rule-picked candidates: space_rules_test.cc.
#include "tuner/space.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/printer.h"
#include "proto/trace_io.h"
#include "test_util.h"  // tests/codegen: BuildAndCheck
#include "tests/tuner/space_test_util.h"
#include "tests/tuner/test_targets.h"

namespace lathe::tuner {
namespace {

class SpaceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SpaceTest, SamplesAndMutationsAreCorrectKernels) {
  auto w = ir::MakeWorkload(GetParam());
  ASSERT_TRUE(w.ok()) << w.status();
  auto space = SearchSpace::Create(*w, HostCpuTarget());
  ASSERT_TRUE(space.ok()) << space.status();
  std::mt19937_64 rng(42);
  std::set<std::string> distinct;
  for (int i = 0; i < 6; ++i) {
    auto c = (*space)->Sample(rng);
    ASSERT_TRUE(c.ok()) << c.status();
    auto m = (*space)->Mutate(*c, rng);
    ASSERT_TRUE(m.ok()) << m.status();
    for (const Candidate* x : {&*c, &*m}) {
      auto sch = (*space)->Apply(*x);
      ASSERT_TRUE(sch.ok()) << sch.status();
      absl::Status st = testing::BuildAndCheck(*sch, 5);
      ASSERT_TRUE(st.ok()) << st << "\n" << ir::TraceToText(x->trace);
      distinct.insert(traceio::TraceToJson(x->trace));
      // The trace alone replays to the same schedule, and maps back to its decisions.
      auto back = (*space)->FromTrace(*traceio::TraceFromJson(traceio::TraceToJson(x->trace)));
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(back->decisions, x->decisions);
    }
  }
  EXPECT_GT(distinct.size(), 4u) << "sampling should explore";

  // The rule-picked candidates are valid, distinct programs too.
  std::vector<Candidate> rules = (*space)->Heuristic(8);
  EXPECT_FALSE(rules.empty());
  EXPECT_LE(rules.size(), 8u);
  std::set<std::string> programs;
  for (const Candidate& c : rules) {
    auto sch = (*space)->Apply(c);
    ASSERT_TRUE(sch.ok()) << sch.status();
    absl::Status st = testing::BuildAndCheck(*sch, 5);
    ASSERT_TRUE(st.ok()) << st << "\n" << ir::TraceToText(c.trace);
    programs.insert(traceio::TraceToJson(c.trace));
  }
  EXPECT_EQ(programs.size(), rules.size());
}

// A mutation that lands on decisions the caller already holds copies that candidate: the
// same draws give the same candidates as replaying each one, and the known ones are used.
TEST_P(SpaceTest, MutationsReuseKnownCandidates) {
  auto w = ir::MakeWorkload(GetParam());
  ASSERT_TRUE(w.ok()) << w.status();
  auto space = SearchSpace::Create(*w, HostCpuTarget());
  ASSERT_TRUE(space.ok()) << space.status();
  std::mt19937_64 rng(7);
  auto base = (*space)->Sample(rng);
  ASSERT_TRUE(base.ok()) << base.status();
  struct Held : KnownCandidates {
    std::map<std::vector<int64_t>, Candidate> by_decisions;
    mutable int found = 0;
    const Candidate* Find(const std::vector<int64_t>& d) const override {
      auto it = by_decisions.find(d);
      if (it == by_decisions.end()) return nullptr;
      ++found;
      return &it->second;
    }
  } held;
  // Replayed: every neighbour from a fixed seed, kept without its schedule.
  std::vector<Candidate> replayed;
  std::mt19937_64 first(11);
  for (int i = 0; i < 40; ++i) {
    auto m = (*space)->Mutate(*base, first);
    if (!m.ok()) continue;
    replayed.push_back(*m);
    Candidate kept = *m;
    kept.schedule.reset();
    held.by_decisions.emplace(kept.decisions, std::move(kept));
  }
  ASSERT_FALSE(replayed.empty());
  // The same draws with the known candidates: the same candidates, none replayed.
  std::mt19937_64 second(11);
  size_t k = 0;
  for (int i = 0; i < 40; ++i) {
    auto m = (*space)->Mutate(*base, second, &held);
    if (!m.ok()) continue;
    ASSERT_LT(k, replayed.size());
    EXPECT_EQ(m->decisions, replayed[k].decisions);
    EXPECT_EQ(m->trace, replayed[k].trace);
    EXPECT_EQ(m->schedule, nullptr) << "replayed although its decisions were known";
    ++k;
  }
  EXPECT_EQ(k, replayed.size());
  EXPECT_EQ(held.found, static_cast<int>(replayed.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Ops, SpaceTest,
    ::testing::Values("matmul:m=64,n=64,k=64", "matmul:m=37,n=50,k=23,epilogue=bias_relu",
                      "batch_matmul:b=2,m=16,n=24,k=8",
                      "conv2d:n=1,c=8,h=14,w=14,k=16,r=3,s=3,pad=1",
                      "conv2d:n=1,c=8,h=10,w=10,k=16,r=3,s=3,pad=1,epilogue=bias_relu",
                      "conv2d:n=1,c=8,h=9,w=9,k=8,r=3,s=3,pad=1,groups=8,epilogue=bias",
                      // Plain depthwise over whole vectors of channels (their first or second
                      // rule copies the input per channel block, channels innermost).
                      "conv2d:n=1,c=32,h=9,w=16,k=32,r=5,s=5,stride=2,pad=2,groups=32,"
                      "epilogue=bias_relu",
                      "conv2d:n=2,c=16,h=7,w=8,k=16,r=3,s=3,pad=1,groups=16",
                      "conv2d:n=1,c=32,h=8,w=10,k=32,r=3,s=3,groups=32,epilogue=bias",
                      "conv2d:n=1,c=4,h=8,w=8,k=8,r=1,s=1,layout=nhwc",
                      "conv2d:n=1,c=16,h=7,w=9,k=16,r=3,s=3,pad=1,layout=nchw8c,epilogue=bias",
                      "conv2d:n=1,c=16,h=9,w=9,k=16,r=3,s=3,stride=2,pad=1,groups=16,"
                      "layout=nchw8c",
                      "sepconv2d:n=1,c=16,h=9,w=11,k=24,r=3,s=3,pad=1,layout=nchw8c,"
                      "dw_epilogue=bias_hswish,epilogue=bias_res",
                      "sepconv2d:n=2,c=16,h=12,w=10,k=8,r=5,s=5,stride=2,pad=2,layout=nchw8c,"
                      "kblock=4",
                      "pool2d:n=1,c=4,h=9,w=9,r=3,s=3,stride=2,pad=1", "softmax:m=8,n=40",
                      "layer_norm:m=6,n=33", "softmax:m=1,n=300", "layer_norm:m=2,n=77"));

// The traces of `n` samples of `space` that chose an rfactor, each applied, built and checked
// against the reference (a failure is reported and the sample left out).
std::vector<std::string> CheckedRFactorSamples(const SearchSpace& space, std::mt19937_64& rng,
                                               int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    auto c = space.Sample(rng);
    if (!c.ok()) {
      ADD_FAILURE() << c.status();
      continue;
    }
    std::string text = ir::TraceToText(c->trace);
    if (text.find("rfactor") == std::string::npos) continue;
    auto sch = space.Apply(*c);
    if (!sch.ok()) {
      ADD_FAILURE() << sch.status() << "\n" << text;
      continue;
    }
    if (absl::Status st = testing::BuildAndCheck(*sch, 3); !st.ok()) {
      ADD_FAILURE() << st << "\n" << text;
      continue;
    }
    out.push_back(std::move(text));
  }
  return out;
}

// Row reductions over long rows get an rfactor choice: vector-wide partial results.
TEST(SpaceRFactorTest, FewLongRowsOfferAnRFactor) {
  auto w = ir::MakeWorkload("softmax:m=1,n=300");
  ASSERT_TRUE(w.ok());
  auto space = SearchSpace::Create(*w, HostCpuTarget());
  ASSERT_TRUE(space.ok()) << space.status();
  std::mt19937_64 rng(7);
  EXPECT_GT(CheckedRFactorSamples(**space, rng, 40).size(), 5u);
  // Many long rows offer it too: each row's partial results are stored as one vector (rows
  // outer), computed for the rows in parallel.
  auto many = ir::MakeWorkload("softmax:m=64,n=300");
  auto many_space = SearchSpace::Create(*many, HostCpuTarget());
  ASSERT_TRUE(many_space.ok());
  const std::vector<std::string> many_rfactor = CheckedRFactorSamples(**many_space, rng, 40);
  for (const std::string& text : many_rfactor) {
    EXPECT_NE(text.find("storage_order"), std::string::npos) << text;
  }
  EXPECT_GT(many_rfactor.size(), 5u);
}

// A row reduction computed inside the output's tile loop must find the whole row there, and
// nothing at root may read it: at a loop over columns, or under a root stage (an rfactor's
// partial results left at root) reading it, it would be recomputed for every column tile or
// point (a 40x6625 softmax timed 8.6 s so).
TEST(SpaceSideStageTest, RowReductionsArePerTileOnlyWhereTheRowIsWhole) {
  auto w = ir::MakeWorkload("softmax:m=64,n=300");
  ASSERT_TRUE(w.ok());
  auto space = SearchSpace::Create(*w, HostCpuTarget());
  ASSERT_TRUE(space.ok()) << space.status();
  std::mt19937_64 rng(11);
  int per_tile = 0;
  for (int i = 0; i < 80; ++i) {
    auto c = (*space)->Sample(rng);
    ASSERT_TRUE(c.ok()) << c.status();
    bool exp_sum_rfactor = false, exp_sum_rf_per_tile = false;
    for (const ir::Instruction& in : c->trace.instructions) {
      if (in.kind == "rfactor" && in.stage == "exp_sum") exp_sum_rfactor = true;
      if (in.kind == "compute_at" && in.stage == "exp_sum.rf") exp_sum_rf_per_tile = true;
    }
    for (const ir::Instruction& in : c->trace.instructions) {
      if (in.kind != "compute_at" || (in.stage != "row_max" && in.stage != "exp_sum")) continue;
      ++per_tile;
      EXPECT_EQ(in.target_loop.find('j'), std::string::npos) << ir::TraceToText(c->trace);
      // exp_sum's partial results read row_max: per tile only with them.
      EXPECT_FALSE(in.stage == "row_max" && exp_sum_rfactor && !exp_sum_rf_per_tile)
          << ir::TraceToText(c->trace);
    }
  }
  EXPECT_GT(per_tile, 5);
}

// Traces of the space before the rfactor decisions existed (decisions without them) replay.
TEST(SpaceRFactorTest, TracesWithoutRFactorDecisionsStillReplay) {
  auto w = ir::MakeWorkload("softmax:m=1,n=300");
  ASSERT_TRUE(w.ok());
  auto space = SearchSpace::Create(*w, HostCpuTarget());
  ASSERT_TRUE(space.ok());
  std::mt19937_64 rng(3);
  for (int i = 0; i < 40; ++i) {
    auto c = (*space)->Sample(rng);
    ASSERT_TRUE(c.ok());
    if (ir::TraceToText(c->trace).find("rfactor") != std::string::npos) continue;
    ir::Trace old = c->trace;
    old.decisions.resize(old.decisions.size() - 2);  // the two side stages' rfactor slots
    auto back = (*space)->FromTrace(old);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->decisions, c->decisions);
    return;
  }
  FAIL() << "no sample without rfactor";
}

// Traces stored before the channel-vector choice existed (one decision fewer) still replay,
// as the choice of the innermost vector axis.
TEST(SpaceChannelVectorTest, TracesWithoutTheChoiceStillReplay) {
  auto w = ir::MakeWorkload("conv2d:n=1,c=16,h=14,w=14,k=16,r=3,s=3,pad=1");
  ASSERT_TRUE(w.ok());
  auto space = SearchSpace::Create(*w, HostCpuTarget());
  ASSERT_TRUE(space.ok());
  std::mt19937_64 rng(5);
  int with = 0, without = 0;
  for (int i = 0; i < 60; ++i) {
    auto c = (*space)->Sample(rng);
    ASSERT_TRUE(c.ok());
    if (c->decisions.back() != 0) {
      EXPECT_NE(ir::TraceToText(c->trace).find("storage_order"), std::string::npos);
      ++with;
      continue;
    }
    ++without;
    ir::Trace old = c->trace;
    old.decisions.pop_back();
    auto back = (*space)->FromTrace(old);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->decisions, c->decisions);
  }
  EXPECT_GT(with, 0);
  EXPECT_GT(without, 0);
}

// Dense blocked convolutions offer chunked candidates (the output tile in memory, the input
// channels added up a chunk at a time over register tiles): sampled ones build and agree with
// the reference on both ISA descriptions, with an epilogue and a residual, strided, 1x1, and
// with column and channel tiles that leave tails.
TEST(SpaceChunkTest, ChunkedCandidatesAreCorrectKernels) {
  const std::vector<std::string> specs = {
      "conv2d:n=1,c=32,h=7,w=7,k=32,r=3,s=3,pad=1,layout=nchw8c,epilogue=bias_res_relu",
      "conv2d:n=1,c=32,h=9,w=11,k=24,r=3,s=3,stride=2,pad=1,layout=nchw8c,epilogue=bias_relu",
      "conv2d:n=1,c=64,h=5,w=6,k=48,r=1,s=1,layout=nchw16c,kblock=16"};
  for (const CpuTarget& target : {Avx2TwoCores(), Avx512TwoCores()}) {
    for (const std::string& spec : specs) {
      std::unique_ptr<SearchSpace> space = SpaceOf(spec, target);
      ASSERT_NE(space, nullptr);
      std::mt19937_64 rng(17);
      int chunked = 0;
      for (int i = 0; i < 200 && chunked < 4; ++i) {
        auto c = space->Sample(rng);
        ASSERT_TRUE(c.ok()) << spec << ": " << c.status();
        const std::string text = ir::TraceToText(c->trace);
        if (text.find("[rc], {") == std::string::npos) continue;
        ++chunked;
        absl::Status st = testing::BuildAndCheck(*c->schedule, 3);
        EXPECT_TRUE(st.ok()) << spec << " (" << target.vector_lanes << " lanes): " << st << "\n"
                             << text;
        // One program, one decision vector: the trace maps back to the same decisions.
        auto back = space->FromTrace(c->trace);
        ASSERT_TRUE(back.ok()) << back.status();
        EXPECT_EQ(back->decisions, c->decisions);
      }
      EXPECT_EQ(chunked, 4) << spec << ": too few chunked samples";
    }
  }
}

// Dense blocked convolutions whose blocks are narrower than a vector (8 channels on AVX-512,
// 4 on AVX2) offer pairing blocks in one vector register where the blocks pair up evenly:
// sampled paired candidates, chunked and not, build and agree with the reference, and their
// traces map back to the same decisions. 24 channels in blocks of 8 (three) are not offered pairs
// on AVX-512; nor are blocks as wide as the vector.
TEST(SpacePairTest, PairedCandidatesAreCorrectKernels) {
  const std::vector<std::pair<std::string, CpuTarget>> cases = {
      {"conv2d:n=1,c=16,h=7,w=9,k=32,r=3,s=3,pad=1,layout=nchw8c,kblock=8,epilogue=bias_relu",
       Avx512TwoCores()},
      {"conv2d:n=1,c=16,h=6,w=5,k=32,r=1,s=1,layout=nchw8c,kblock=8", Avx512TwoCores()},
      {"conv2d:n=1,c=8,h=6,w=7,k=16,r=3,s=3,stride=2,pad=1,layout=nchw4c,kblock=4",
       Avx2TwoCores()}};
  for (const auto& [spec, target] : cases) {
    std::unique_ptr<SearchSpace> space = SpaceOf(spec, target);
    ASSERT_NE(space, nullptr);
    std::mt19937_64 rng(23);
    int paired = 0, chunked = 0;
    for (int i = 0; i < 400 && paired < 6; ++i) {
      auto c = space->Sample(rng);
      ASSERT_TRUE(c.ok()) << spec << ": " << c.status();
      const std::string text = ir::TraceToText(c->trace);
      if (text.find("k.1+kv") == std::string::npos) continue;
      ++paired;
      chunked += text.find("[rc], {") != std::string::npos ? 1 : 0;
      absl::Status st = testing::BuildAndCheck(*c->schedule, 5);
      EXPECT_TRUE(st.ok()) << spec << ": " << st << "\n" << text;
      auto back = space->FromTrace(c->trace);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(back->decisions, c->decisions);
    }
    EXPECT_EQ(paired, 6) << spec << ": too few paired samples";
    if (spec.find("r=3") != std::string::npos) {
      EXPECT_GT(chunked, 0) << spec << ": no chunked paired sample";
    }
  }
  for (const auto& [spec, target] : std::vector<std::pair<std::string, CpuTarget>>{
           {"conv2d:n=1,c=16,h=7,w=9,k=24,r=3,s=3,pad=1,layout=nchw8c,kblock=8", Avx512TwoCores()},
           {"conv2d:n=1,c=16,h=7,w=9,k=32,r=3,s=3,pad=1,layout=nchw16c,kblock=16",
            Avx512TwoCores()}}) {
    std::unique_ptr<SearchSpace> space = SpaceOf(spec, target);
    ASSERT_NE(space, nullptr);
    std::mt19937_64 rng(29);
    for (int i = 0; i < 100; ++i) {
      auto c = space->Sample(rng);
      ASSERT_TRUE(c.ok()) << spec << ": " << c.status();
      EXPECT_EQ(ir::TraceToText(c->trace).find("k.1+kv"), std::string::npos) << spec;
    }
  }
}

// A dense blocked 3x3 convolution's first rule-picked candidate is chunked: on AVX2 (nchw8c)
// 4 channel blocks x 3 columns of registers, the whole 7-column rows, two input blocks per
// chunk; unchunked register-tile candidates follow. Traces stored before the chunk choice
// existed (one decision fewer) replay as unchunked.
TEST(SpaceChunkTest, DenseConvsGetAChunkedCandidateFirst) {
  std::vector<std::string> rules =
      RuleTexts("conv2d:n=1,c=512,h=7,w=7,k=512,r=3,s=3,pad=1,layout=nchw8c,epilogue=bias_res_relu",
                Avx2TwoCores(), 6);
  ASSERT_FALSE(rules.empty());
  const std::string& text = rules[0];
  EXPECT_NE(text.find("split(conv2d, [rc], {2})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y, [k], {4})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y, [x], {7})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(conv2d, [x], {3})"), std::string::npos) << text;

  std::unique_ptr<SearchSpace> sspace =
      SpaceOf("conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,pad=1,layout=nchw8c", Avx2TwoCores());
  ASSERT_NE(sspace, nullptr);
  std::vector<Candidate> srules = sspace->Heuristic(8);
  ASSERT_FALSE(srules.empty());
  // Every dense 3x3 conv, small weights too, starts chunked: the tuned best of all 12 3x3
  // tasks of ResNet-18 was chunked (session 10), and the untuned ResNet-18 took 26-29 ms
  // with chunked rules first against 29-37 ms without, PP-OCR det 61-69 against 99-129 ms
  // (Zen 3, AVX2, 2 threads, alternated).
  EXPECT_NE(ir::TraceToText(srules[0].trace).find("[rc], {"), std::string::npos);
  const Candidate* unchunked = nullptr;
  for (const Candidate& c : srules) {
    if (!unchunked && ir::TraceToText(c.trace).find("[rc], {") == std::string::npos) {
      unchunked = &c;
    }
  }
  ASSERT_NE(unchunked, nullptr) << "unchunked candidates are measured in the first round too";
  // Output blocks narrower than the vector (24 channels in blocks of 8 on AVX-512) start
  // unchunked, and still measure a chunked candidate third; on AVX2 the same block is a whole
  // vector and starts chunked.
  const std::string narrow = "conv2d:n=1,c=96,h=40,w=40,k=24,kblock=8,r=3,s=3,pad=1,layout=nchw16c";
  std::vector<std::string> narrow_rules = RuleTexts(narrow, Avx512TwoCores(), 3);
  ASSERT_EQ(narrow_rules.size(), 3u);
  EXPECT_EQ(narrow_rules[0].find("[rc], {"), std::string::npos) << narrow_rules[0];
  EXPECT_NE(narrow_rules[2].find("[rc], {"), std::string::npos) << narrow_rules[2];
  std::vector<std::string> narrow_avx2 = RuleTexts(
      "conv2d:n=1,c=96,h=40,w=40,k=24,kblock=8,r=3,s=3,pad=1,layout=nchw8c", Avx2TwoCores(), 1);
  ASSERT_EQ(narrow_avx2.size(), 1u);
  EXPECT_NE(narrow_avx2[0].find("[rc], {"), std::string::npos) << narrow_avx2[0];

  // An unchunked candidate's trace without the last decision replays to it.
  const Candidate& plain = *unchunked;
  ir::Trace old = plain.trace;
  ASSERT_EQ(old.decisions.back(), 0);
  old.decisions.pop_back();
  auto back = sspace->FromTrace(old);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->decisions, plain.decisions);
}

}  // namespace
}  // namespace lathe::tuner
