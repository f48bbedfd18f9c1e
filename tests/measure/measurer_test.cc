// The sandboxed measurer with its real child process: classified results for good, invalid,
// crashing, hanging and wrong candidates, and a child that is replaced after each failure.
// GPU candidates: without a GPU a clear FailedPrecondition; with one (GpuMeasurerTest, which
// skips without a GPU) results that agree with the reference, positive timings, and an
// injected illegal access that is classified while the next candidate still succeeds.
#include "measure/measurer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "absl/strings/match.h"
#include "ir/schedule.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "measure/measure_child.h"
#include "proto/trace_io.h"
#include "tests/measure/fault_plan.h"
#include "worker/discovery.h"

namespace lathe::measure {
namespace {

// The worker's devices, which say how to measure on each (worker/discovery.h).
using worker::DescribeCpu;
using worker::Device;
using worker::DiscoverGpus;
using worker::MeasurerOptionsFor;

std::unique_ptr<Measurer> NewMeasurer(double timeout_s = 20) {
  MeasurerOptions o;
  // The build's child, or the one LATHE_MEASURE_BIN names (a bundle on a GPU host:
  // scripts/gpu-host-check.sh).
  const char* env = std::getenv("LATHE_MEASURE_BIN");
  o.child_path = env != nullptr && *env != '\0' ? env : LATHE_MEASURE_BIN;
  o.timeout_s = timeout_s;
  o.child_env = {test_support::ProcessFaultPlan().Env()};
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
  r.set_trace_json(traceio::TraceToJson(s.trace()));
  r.set_min_repeat_ms(5);
  test_support::ProcessFaultPlan().Add(id, fault);
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

// A request carries its trace in one of two forms: the JSON the tuning store keeps (the
// driver's and the daemon's, and every older sender's) or the message with the workload
// named once by the request (what the measurer sends its child). Both read as one trace, and
// both are measured.
TEST(MeasurerTest, TheTraceIsReadFromEitherFormOfTheRequest) {
  lathe::v1::MeasureRequest json = Request("form-json");
  absl::StatusOr<ir::Trace> from_json = traceio::RequestTrace(json);
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_EQ(from_json->workload, json.workload());

  lathe::v1::MeasureRequest typed = Request("form-typed");
  traceio::SetRequestTraceJson(typed.trace_json(), &typed);
  ASSERT_TRUE(traceio::HasTraceMessage(typed));
  EXPECT_TRUE(typed.trace_json().empty());
  lathe::v1::Trace message;
  ASSERT_TRUE(message.ParseFromString(typed.trace()));
  EXPECT_TRUE(message.workload().empty());  // named once, by the request
  absl::StatusOr<ir::Trace> from_typed = traceio::RequestTrace(typed);
  ASSERT_TRUE(from_typed.ok()) << from_typed.status();
  EXPECT_EQ(ir::ProgramIdOf(*from_typed), ir::ProgramIdOf(*from_json));
  EXPECT_EQ(traceio::TraceToJson(*from_typed), json.trace_json());
  // The stored form and the program come out the same from either form.
  EXPECT_EQ(traceio::RequestTraceJson(typed), json.trace_json());
  EXPECT_EQ(traceio::RequestProgramId(typed), traceio::ProgramIdOfTraceJson(json.trace_json()));
  EXPECT_FALSE(traceio::SameRequestTrace(typed, json));
  lathe::v1::MeasureRequest again = Request("form-typed-again");
  traceio::SetRequestTrace(*from_json, &again);
  EXPECT_TRUE(traceio::SameRequestTrace(typed, again));

  auto m = NewMeasurer();
  ASSERT_NE(m, nullptr);
  for (const lathe::v1::MeasureRequest& r : {json, typed}) {
    auto result = m->Measure(r);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->error_class(), lathe::v1::OK)
        << r.candidate_id() << ": " << result->error_msg();
    EXPECT_GT(result->median_us(), 0) << r.candidate_id();
  }
  lathe::v1::MeasureRequest broken = Request("form-broken");
  traceio::SetRequestTraceJson("{not json", &broken);  // kept as it came, the child's to report
  EXPECT_FALSE(traceio::HasTraceMessage(broken));
  EXPECT_EQ(traceio::RequestTraceJson(broken), "{not json");
  auto result = m->Measure(broken);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->error_class(), lathe::v1::INVALID_SCHEDULE);
  lathe::v1::MeasureRequest garbled = Request("form-garbled");
  garbled.clear_trace_json();
  garbled.set_trace(std::string("\xff\xff\x01not a trace", 14));
  EXPECT_FALSE(traceio::RequestTrace(garbled).ok());
  result = m->Measure(garbled);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->error_class(), lathe::v1::INVALID_SCHEDULE) << result->error_msg();
}

// The arguments cold_weights evicts are what a model holds as constants, by role: weights,
// packed panels, per-channel epilogue tensors, layer norm's gamma and beta; never the input,
// a residual or the output.
TEST(MeasurerTest, ParametersAreTheArgumentsAModelHoldsAsConstants) {
  auto params = [](const std::string& spec) {
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(spec);
    EXPECT_TRUE(w.ok()) << w.status();
    std::vector<std::string> names;
    if (!w.ok()) return names;
    for (size_t i : ParameterArgs(*w)) names.push_back(w->args[i]->name);
    return names;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(params("conv2d:n=1,c=16,h=8,w=8,k=32,r=3,s=3,pad=1,epilogue=bias_res_relu"),
            (V{"W", "bias"}));
  EXPECT_EQ(params("conv2d:n=1,c=16,h=8,w=8,k=16,r=3,s=3,pad=1,layout=nchw16c,"
                   "epilogue=bias_hswish_scale_shift"),
            (V{"W", "bias", "scale", "shift"}));
  EXPECT_EQ(params("matmul:m=8,n=64,k=16,bpanel=32,epilogue=bias"), (V{"B", "bias"}));
  EXPECT_EQ(params("sepconv2d:n=1,c=16,h=8,w=8,k=32,r=3,s=3,pad=1,layout=nchw16c,"
                   "dw_epilogue=bias_hswish_scale_shift,epilogue=bias_res"),
            (V{"DW", "dw_bias", "dw_scale", "dw_shift", "W", "bias"}));
  EXPECT_EQ(params("matmul:m=8,n=64,k=16"), V{});  // B may be an activation
  EXPECT_EQ(params("batch_matmul:b=2,m=8,n=8,k=8"), V{});
  EXPECT_EQ(params("layer_norm:m=4,n=32"), (V{"gamma", "beta"}));
  EXPECT_EQ(params("softmax:m=4,n=32"), V{});
}

// A request with cold_weights is checked and timed as any other (the eviction happens between
// the timed calls, outside them).
TEST(MeasurerTest, ColdWeightsCandidateIsCheckedAndTimed) {
  auto w = ir::MakeWorkload("conv2d:n=1,c=64,h=6,w=6,k=64,r=3,s=3,pad=1,epilogue=bias_relu");
  ASSERT_TRUE(w.ok()) << w.status();
  ir::Schedule s(*w);
  lathe::v1::MeasureRequest req;
  req.set_candidate_id("cold");
  req.set_workload(w->canonical);
  req.set_trace_json(traceio::TraceToJson(s.trace()));
  req.set_min_repeat_ms(5);
  req.set_cold_weights(true);
  lathe::v1::MeasureResult r = MeasureInProcess(req);
  EXPECT_EQ(r.error_class(), lathe::v1::OK) << r.error_msg();
  EXPECT_GE(r.repeats_us_size(), 3);
  EXPECT_GT(r.median_us(), 0);
}

// A candidate slower than the cutoff is timed by one call after its checked call; a cutoff
// above its latency changes nothing.
TEST(MeasurerTest, CandidateOverTheCutoffIsTimedOnce) {
  auto m = NewMeasurer();
  ASSERT_NE(m, nullptr);
  auto req = Request("slow");
  req.set_cutoff_us(0.001);
  auto r = m->Measure(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->error_class(), lathe::v1::OK) << r->error_msg();
  EXPECT_EQ(r->repeats_us_size(), 1);
  EXPECT_GT(r->median_us(), 0);
  req.set_candidate_id("fast");
  req.set_cutoff_us(1e9);
  r = m->Measure(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(r->repeats_us_size(), 3);
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

// A GPU trace of `spec` built from IR primitives alone (no CUDA library needed): paddings
// inlined, every other stage's spatial loops fused, split by a thread count drawn from `seed`
// and bound to blockIdx.x / threadIdx.x.
std::string GpuTraceJson(const std::string& spec, uint64_t seed) {
  auto w = ir::MakeWorkload(spec);
  EXPECT_TRUE(w.ok()) << w.status();
  ir::Schedule s(*w, "cuda");
  std::mt19937_64 rng(seed);
  std::vector<std::string> names;
  for (const ir::Stage& st : s.stages()) names.push_back(st.name);
  for (const std::string& n : names) {
    const ir::Stage* st = s.FindStage(n);
    if (!st->is_output && st->tensor->tag == "pad") {
      EXPECT_TRUE(s.ComputeInline(n).ok());
    }
  }
  for (const std::string& n : names) {
    const ir::Stage* st = s.FindStage(n);
    if (st->attach == ir::AttachKind::kInline) continue;
    std::vector<std::string> spatial(st->root_loops.begin(),
                                     st->root_loops.begin() + st->tensor->axes.size());
    int64_t extent = 1;
    for (const std::string& l : spatial) extent *= st->loops.at(l).extent;
    std::string fused = spatial[0];
    if (spatial.size() > 1) {
      auto f = s.Fuse(n, spatial);
      EXPECT_TRUE(f.ok()) << f.status();
      fused = *f;
    }
    static const int64_t kThreads[] = {32, 64, 128, 256, 512};
    int64_t t = std::min<int64_t>(kThreads[rng() % 5], extent);
    auto parts = s.Split(n, fused, {t});
    EXPECT_TRUE(parts.ok()) << parts.status();
    EXPECT_TRUE(s.Bind(n, (*parts)[0], "blockIdx.x").ok());
    EXPECT_TRUE(s.Bind(n, (*parts)[1], "threadIdx.x").ok());
  }
  return traceio::TraceToJson(s.trace());
}

lathe::v1::MeasureRequest GpuRequest(const std::string& id, const std::string& spec, uint64_t seed,
                                     const std::string& fault = "") {
  auto w = ir::MakeWorkload(spec);
  lathe::v1::MeasureRequest r;
  r.set_candidate_id(id);
  r.set_workload(w->canonical);
  r.set_trace_json(GpuTraceJson(spec, seed));
  r.set_min_repeat_ms(5);
  r.set_flush_cache(true);
  test_support::ProcessFaultPlan().Add(id, fault);
  return r;
}

TEST(MeasurerTest, CudaCandidateWithoutGpuIsAClearErrorAndTheMeasurerGoesOn) {
  if (!DiscoverGpus().empty()) GTEST_SKIP() << "this machine has a GPU";
  auto m = NewMeasurer();
  ASSERT_NE(m, nullptr);
  auto r = m->Measure(GpuRequest("g1", "matmul:m=17,n=31,k=13", 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("no GPU to measure on"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("cuda:0"), std::string::npos) << r.status();
  // The CPU still measures, with the same child.
  auto good = m->Measure(Request("after"));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->error_class(), lathe::v1::OK) << good->error_msg();
  EXPECT_EQ(m->restarts(), 0);
  // The child itself, asked directly, answers a runtime error naming the cause.
  auto direct = MeasureInProcess(GpuRequest("g2", "softmax:m=5,n=17", 2));
  EXPECT_EQ(direct.error_class(), lathe::v1::NO_DEVICE) << direct.error_msg();
  EXPECT_NE(direct.error_msg().find("cuda:0"), std::string::npos) << direct.error_msg();
  // ... and on the ordinal it was started with.
  ChildOptions on3;
  on3.gpu_ordinal = 3;
  auto third = MeasureInProcess(GpuRequest("g3", "softmax:m=5,n=17", 2), on3);
  EXPECT_EQ(third.error_class(), lathe::v1::NO_DEVICE) << third.error_msg();
}

// The child's command line: what the Measurer passes comes back as it was; anything else is
// refused, naming the argument.
TEST(MeasurerTest, ChildCommandLineRoundTripsAndRefusesGarbage) {
  ChildOptions o;
  o.gpu_ordinal = 2;
  o.emulated_arch = "sm_90";
  absl::StatusOr<ChildOptions> back = ParseChildArgs(ChildArgs(o));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->gpu_ordinal, 2);
  EXPECT_EQ(back->emulated_arch, "sm_90");
  absl::StatusOr<ChildOptions> none = ParseChildArgs({});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->gpu_ordinal, 0);
  EXPECT_TRUE(none->emulated_arch.empty());
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"--gpu"}, {"--gpu", "-1"}, {"--gpu", "x"}, {"--emulate", "90"}, {"--verbose"}}) {
    absl::StatusOr<ChildOptions> r = ParseChildArgs(bad);
    ASSERT_FALSE(r.ok()) << bad[0];
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(bad[0]), std::string::npos) << r.status();
  }
}

TEST(MeasurerTest, GpuDevicesMeasureWithTheirOwnOrdinal) {
  Device gpu;
  gpu.info.set_kind("cuda");
  gpu.info.set_index(3);
  MeasurerOptions base;
  base.timeout_s = 7;
  EXPECT_EQ(MeasurerOptionsFor(gpu, base).gpu_ordinal, 3);
  EXPECT_EQ(MeasurerOptionsFor(gpu, base).timeout_s, 7);
  EXPECT_EQ(MeasurerOptionsFor(DescribeCpu(), base).gpu_ordinal, 0);
  for (const Device& d : DiscoverGpus()) EXPECT_TRUE(d.can_measure) << d.why_not;
}

#define REQUIRE_GPU() \
  if (DiscoverGpus().empty()) GTEST_SKIP() << "no GPU (or no CUDA driver) on this machine"

TEST(GpuMeasurerTest, CandidatesAgreeWithTheReferenceAndTimePositive) {
  REQUIRE_GPU();
  auto m = NewMeasurer(60);
  ASSERT_NE(m, nullptr);
  int n = 0;
  for (const std::string spec :
       {"matmul:m=64,n=48,k=40,epilogue=bias", "conv2d:n=2,c=4,h=11,w=7,k=6,r=3,s=3,pad=1",
        "softmax:m=5,n=17", "layer_norm:m=6,n=33",
        "pool2d:n=1,c=3,h=9,w=9,r=3,s=3,stride=2,pad=1"}) {
    for (uint64_t seed = 0; seed < 3; ++seed) {
      auto r = m->Measure(GpuRequest("g" + std::to_string(n++), spec, seed));
      ASSERT_TRUE(r.ok()) << spec << ": " << r.status();
      EXPECT_EQ(r->error_class(), lathe::v1::OK) << spec << ": " << r->error_msg();
      EXPECT_GE(r->repeats_us_size(), 3);
      EXPECT_GT(r->median_us(), 0);
      EXPECT_GT(r->gflops(), 0);
      EXPECT_GE(r->cv(), 0);
    }
  }
  EXPECT_EQ(m->restarts(), 0);
}

TEST(GpuMeasurerTest, IllegalAccessIsClassifiedAndTheNextCandidateSucceeds) {
  REQUIRE_GPU();
  auto m = NewMeasurer(60);
  ASSERT_NE(m, nullptr);
  const std::string spec = "matmul:m=17,n=31,k=13";
  auto bad = m->Measure(GpuRequest("out-of-bounds", spec, 1, "illegal_access"));
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_EQ(bad->error_class(), lathe::v1::RUNTIME_ERROR);
  EXPECT_NE(bad->error_msg().find("ILLEGAL_ADDRESS"), std::string::npos) << bad->error_msg();
  EXPECT_EQ(m->restarts(), 1);
  auto good = m->Measure(GpuRequest("good", spec, 2));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->error_class(), lathe::v1::OK) << good->error_msg();
  auto wrong = m->Measure(GpuRequest("wrong", spec, 3, "wrong"));
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_EQ(wrong->error_class(), lathe::v1::WRONG_ANSWER) << wrong->error_msg();
  // A CPU candidate through the same measurer is unaffected.
  auto cpu = m->Measure(Request("cpu"));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->error_class(), lathe::v1::OK) << cpu->error_msg();
}

}  // namespace
}  // namespace lathe::measure
