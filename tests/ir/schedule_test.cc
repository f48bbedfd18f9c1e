// Schedule primitives: their effect on loops, their trace records and their error cases.
#include "ir/schedule.h"

#include <gtest/gtest.h>

#include "ir/trace.h"
#include "ir/workload.h"
#include "proto/trace_io.h"

namespace lathe::ir {
namespace {

Workload Matmul(int m, int n, int k) {
  auto w = MakeWorkload("matmul:m=" + std::to_string(m) + ",n=" + std::to_string(n) +
                        ",k=" + std::to_string(k));
  EXPECT_TRUE(w.ok()) << w.status();
  return *w;
}

TEST(ScheduleTest, SplitMakesNamedLoopsWithCeilExtents) {
  Schedule sch(Matmul(100, 64, 32));
  auto names = sch.Split("C", "i", {4, 8});
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"i.0", "i.1", "i.2"}));
  const Stage* st = sch.FindStage("C");
  EXPECT_EQ(st->loops.at("i.0").extent, 4);  // ceil(100 / 32)
  EXPECT_EQ(st->loops.at("i.1").extent, 4);
  EXPECT_EQ(st->loops.at("i.2").extent, 8);
  EXPECT_EQ(st->leaves, (std::vector<std::string>{"i.0", "i.1", "i.2", "j", "k"}));
}

TEST(ScheduleTest, ErrorsNameThePrimitiveStageAndLoop) {
  Schedule sch(Matmul(16, 16, 16));
  auto s = sch.Split("C", "q", {4});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("split"), std::string::npos);
  EXPECT_NE(s.status().message().find("'q'"), std::string::npos);
  EXPECT_NE(s.status().message().find("'C'"), std::string::npos);
  EXPECT_FALSE(sch.Split("C", "i", {0}).ok());
  EXPECT_FALSE(sch.Split("nope", "i", {2}).ok());
  EXPECT_FALSE(sch.Parallel("C", "k").ok());     // a reduce loop
  EXPECT_FALSE(sch.Fuse("C", {"i", "k"}).ok());  // not adjacent / mixed kinds
  EXPECT_FALSE(sch.ComputeInline("C").ok());     // output
  EXPECT_TRUE(sch.trace().instructions.empty()) << "failed primitives must not be recorded";
}

TEST(ScheduleTest, TraceRoundTripReplaysToTheSameLoops) {
  Schedule sch(Matmul(64, 64, 64));
  ASSERT_TRUE(sch.CacheWrite("C", "local").ok());
  ASSERT_TRUE(sch.Split("C", "i", {8}).ok());
  ASSERT_TRUE(sch.Split("C", "j", {16}).ok());
  ASSERT_TRUE(sch.Reorder("C", {"i.0", "j.0", "i.1", "j.1"}).ok());
  ASSERT_TRUE(sch.Fuse("C", {"i.0", "j.0"}).ok());
  ASSERT_TRUE(sch.Parallel("C", "i.0+j.0").ok());
  ASSERT_TRUE(sch.ComputeAt("C.local", "C", "i.0+j.0").ok());
  ASSERT_TRUE(sch.Vectorize("C", "j.1").ok());
  std::string json = traceio::TraceToJson(sch.trace());
  auto back = traceio::TraceFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, sch.trace());
  auto replay = ApplyTrace(sch.workload(), *back);
  ASSERT_TRUE(replay.ok()) << replay.status();
  ASSERT_EQ(replay->stages().size(), sch.stages().size());
  for (size_t i = 0; i < sch.stages().size(); ++i) {
    EXPECT_EQ(replay->stages()[i].name, sch.stages()[i].name);
    EXPECT_EQ(replay->stages()[i].leaves, sch.stages()[i].leaves);
  }
}

TEST(ProgramIdTest, TheProgramNotTheDecisionsThatMadeIt) {
  Schedule a(Matmul(64, 64, 64));
  ASSERT_TRUE(a.Split("C", "i", {8}).ok());
  ASSERT_TRUE(a.Vectorize("C", "i.1").ok());
  Trace t = a.trace();
  const ProgramId id = ProgramIdOf(t);
  EXPECT_EQ(id.Hex().size(), 32u);
  // The sketch and decisions that produced a trace are not part of its program.
  Trace decided = t;
  decided.sketch = 3;
  decided.decisions = {1, 2, 3};
  EXPECT_EQ(ProgramIdOf(decided), id);
  // Stored and parsed back: the same program.
  EXPECT_EQ(traceio::ProgramIdOfTraceJson(traceio::TraceToJson(decided)), id);
  // Any instruction field, the workload or the target makes another program.
  Trace other = t;
  other.instructions[0].factors = {16};
  EXPECT_NE(ProgramIdOf(other), id);
  other = t;
  other.instructions[1].loops = {"i.0"};
  EXPECT_NE(ProgramIdOf(other), id);
  other = t;
  other.target = "cuda:sm_90";
  EXPECT_NE(ProgramIdOf(other), id);
  other = t;
  other.workload = "matmul:epilogue=none,k=64,m=64,n=32";
  EXPECT_NE(ProgramIdOf(other), id);
  // Field boundaries count: moving a character from one string to the next is another program.
  other = t;
  other.instructions[0].stage = "C";
  other.instructions[0].target = "x";
  Trace moved = t;
  moved.instructions[0].stage = "Cx";
  EXPECT_NE(ProgramIdOf(other), ProgramIdOf(moved));
  // Text that is not a trace still has a stable id of its own.
  EXPECT_EQ(traceio::ProgramIdOfTraceJson("{not json"), traceio::ProgramIdOfTraceJson("{not json"));
  EXPECT_NE(traceio::ProgramIdOfTraceJson("{not json"),
            traceio::ProgramIdOfTraceJson("{not json!"));
  EXPECT_NE(traceio::ProgramIdOfTraceJson("{not json"), id);
}

TEST(ScheduleTest, NewerTraceVersionIsRefused) {
  auto t = traceio::TraceFromJson(R"({"version": 99, "workload": "x", "instructions": []})");
  EXPECT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("newer"), std::string::npos);
  EXPECT_FALSE(traceio::TraceFromJson("{not json").ok());
}

}  // namespace
}  // namespace lathe::ir
