// The sandboxed measurer with its real child process: classified results for good, invalid,
// crashing, hanging and wrong candidates, and a child that is replaced after each failure.
#include "worker/measurer.h"

#include <gtest/gtest.h>

#include "ir/schedule.h"
#include "ir/trace.h"
#include "ir/workload.h"

namespace lathe::worker {
namespace {

std::unique_ptr<Measurer> NewMeasurer(double timeout_s = 20) {
  MeasurerOptions o;
  o.child_path = LATHE_MEASURE_BIN;
  o.timeout_s = timeout_s;
  o.child_env = {"LATHE_TEST_FAULTS=1"};
  auto m = Measurer::Create(o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

lathe::v1::MeasureRequest Request(const std::string& id, const std::string& fault = "") {
  auto w = ir::MakeWorkload("matmul:m=33,n=40,k=17");
  ir::Schedule s(*w);
  (void)s.Split("C", "j", {8});
  (void)s.Vectorize("C", "j.1");
  lathe::v1::MeasureRequest r;
  r.set_candidate_id(id);
  r.set_workload(w->canonical);
  r.set_trace_json(ir::TraceToJson(s.trace()));
  r.set_min_repeat_ms(5);
  r.set_fault(fault);
  return r;
}

TEST(MeasurerTest, GoodCandidateIsTimedWithEveryRepeatKept) {
  auto m = NewMeasurer();
  ASSERT_NE(m, nullptr);
  auto r = m->Measure(Request("c1"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->error_class(), lathe::v1::OK) << r->error_msg();
  EXPECT_EQ(r->candidate_id(), "c1");
  EXPECT_GE(r->repeats_us_size(), 3);
  EXPECT_GT(r->median_us(), 0);
  EXPECT_GE(r->cv(), 0);
  EXPECT_GT(r->gflops(), 0);
}

TEST(MeasurerTest, InvalidTraceIsAnInvalidSchedule) {
  auto m = NewMeasurer();
  ASSERT_NE(m, nullptr);
  auto req = Request("bad");
  req.set_trace_json(
      R"({"version":1,"instructions":[{"kind":"split","stage":"C","loops":["zz"],"factors":["2"]}]})");
  auto r = m->Measure(req);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->error_class(), lathe::v1::INVALID_SCHEDULE);
  EXPECT_NE(r->error_msg().find("zz"), std::string::npos) << r->error_msg();
  req.set_trace_json("{not json");
  r = m->Measure(req);
  EXPECT_EQ(r->error_class(), lathe::v1::INVALID_SCHEDULE);
}

TEST(MeasurerTest, CrashingHangingAndWrongCandidatesAreClassifiedAndTheChildReplaced) {
  auto m = NewMeasurer(/*timeout_s=*/3);
  ASSERT_NE(m, nullptr);
  auto crash = m->Measure(Request("crash", "crash"));
  ASSERT_TRUE(crash.ok());
  EXPECT_EQ(crash->error_class(), lathe::v1::RUNTIME_ERROR);
  EXPECT_NE(crash->error_msg().find("signal"), std::string::npos) << crash->error_msg();

  auto hang = m->Measure(Request("hang", "hang"));
  ASSERT_TRUE(hang.ok());
  EXPECT_EQ(hang->error_class(), lathe::v1::TIMEOUT);

  auto wrong = m->Measure(Request("wrong", "wrong"));
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->error_class(), lathe::v1::WRONG_ANSWER) << wrong->error_msg();

  auto good = m->Measure(Request("after"));
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good->error_class(), lathe::v1::OK) << good->error_msg();
  EXPECT_EQ(m->restarts(), 2);
}

TEST(MeasurerTest, MissingChildBinaryIsAClearError) {
  MeasurerOptions o;
  o.child_path = "/nonexistent/lathe-measure";
  auto m = Measurer::Create(o);
  EXPECT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("lathe-measure"), std::string::npos);
}

}  // namespace
}  // namespace lathe::worker
