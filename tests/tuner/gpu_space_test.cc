// The GPU search space (no GPU needed): for every op, sampled and mutated candidates and the
// rule-picked ones apply, replay from their trace (JSON round trip and FromTrace), lower,
// generate CUDA C within the device limits, compile through NVRTC and run on the GPU
// emulator in agreement with the reference (10 per op for sm_90; 50 per op for sm_80 and
// sm_90 under the label e2e); the rule-picked SGEMM has the shape of a hand-written kernel and
// fits two blocks per SM without spills; the factory picks the space by target string. The
// candidates of one op compile together in one NVRTC program and one emulator module.
//
// This file is globbed into tuner_test too, where it compiles to nothing: its own binary
// (gpu_space_test, built only with the CUDA backend) defines LATHE_GPU_SPACE_TEST and runs
// the long variant under the label e2e.
#ifdef LATHE_GPU_SPACE_TEST

#include "tuner/gpu_space.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>

#include "../codegen/op_specs.h"
#include "codegen/cuda/contraction.h"
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/cuda_driver.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/cuda/resources.h"
#include "gpuemu/host_compiler.h"
#include "gpuemu/verify.h"
#include "ir/schedule.h"
#include "ir/trace.h"
#include "proto/trace_io.h"
#include "tuner/space_factory.h"
#include "tuner/tune_common.h"

namespace lathe::tuner {
namespace {

#define SKIP_WITHOUT_NVRTC() \
  if (!codegen::cuda::HaveNvrtc()) GTEST_SKIP() << "this build has no NVRTC"

ir::Target Parsed(const std::string& text) {
  absl::StatusOr<ir::Target> t = ir::ParseTarget(text);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : ir::Target{};
}

bool HasKind(const ir::Trace& t, const std::string& kind, const std::string& tag = "") {
  for (const ir::Instruction& i : t.instructions) {
    if (i.kind == kind && (tag.empty() || i.tag == tag)) return true;
  }
  return false;
}

// Samples `count` candidates of `spec` (half sampled, half mutated from them), checks each
// replays and fits the limits, and compiles them all for `archs`. Returns the traces.
std::vector<ir::Trace> CheckCandidates(const std::string& spec, int count, uint64_t seed,
                                       const std::vector<std::string>& archs = {"sm_90"},
                                       gpuemu::OptLevel opt = gpuemu::OptLevel::kFast) {
  std::vector<ir::Trace> traces;
  auto w = ir::MakeWorkload(spec);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return traces;
  auto space = CreateSearchSpace(*w, "cuda:sm_90");
  EXPECT_TRUE(space.ok()) << space.status();
  if (!space.ok()) return traces;
  std::mt19937_64 rng(seed);
  std::vector<Candidate> cands;
  for (int i = 0; i < (count + 1) / 2; ++i) {
    auto c = (*space)->Sample(rng);
    EXPECT_TRUE(c.ok()) << spec << ": " << c.status();
    if (!c.ok()) return traces;
    cands.push_back(std::move(*c));
  }
  for (int i = 0; static_cast<int>(cands.size()) < count; ++i) {
    auto m = (*space)->Mutate(cands[i % ((count + 1) / 2)], rng);
    EXPECT_TRUE(m.ok()) << spec << ": " << m.status();
    if (!m.ok()) return traces;
    EXPECT_NE(m->decisions, cands[i % ((count + 1) / 2)].decisions);
    cands.push_back(std::move(*m));
  }
  // The rule-picked candidates too.
  for (Candidate& c : (*space)->Heuristic(2)) cands.push_back(std::move(c));
  std::string kernels;
  std::vector<codegen::cuda::CudaSource> sources;
  codegen::cuda::GpuLimits limits;  // the H100 defaults of GpuTarget
  for (size_t i = 0; i < cands.size(); ++i) {
    const Candidate& c = cands[i];
    EXPECT_EQ(c.trace.target, "cuda");
    // What travels: the JSON form of the trace; a worker replays it.
    auto parsed = traceio::TraceFromJson(traceio::TraceToJson(c.trace));
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (!parsed.ok()) continue;
    EXPECT_EQ(*parsed, c.trace);
    auto again = (*space)->FromTrace(*parsed);
    EXPECT_TRUE(again.ok()) << spec << ": " << again.status();
    if (again.ok()) {
      EXPECT_EQ(again->decisions, c.decisions);
    }
    auto sch = ir::ApplyTrace(*w, *parsed);
    EXPECT_TRUE(sch.ok()) << sch.status();
    if (!sch.ok()) continue;
    auto src = codegen::cuda::BuildCudaSource(*sch, "c" + std::to_string(i));
    EXPECT_TRUE(src.ok()) << spec << ": " << src.status() << "\n" << ir::TraceToText(c.trace);
    if (!src.ok()) continue;
    absl::Status lim = codegen::cuda::CheckLaunchLimits(src->plan, limits);
    EXPECT_TRUE(lim.ok()) << lim;
    kernels += src->kernels;
    traces.push_back(c.trace);
    sources.push_back(std::move(*src));
  }
  std::string source = codegen::cuda::CudaPrelude() + kernels;
  for (const std::string& arch : archs) {
    auto cubin = codegen::cuda::CompileToCubin(source, arch);
    EXPECT_TRUE(cubin.ok()) << spec << " " << arch << ": "
                            << cubin.status().message().substr(0, 4000);
  }
  // Every candidate runs on the GPU emulator and agrees with the reference (the test
  // workloads; not the benchmarks' large shapes, which take minutes there).
  if (!gpuemu::FindHostCompiler().ok() || w->flops > 1e8) return traces;
  auto data = gpuemu::MakeReferenceData(*w);
  EXPECT_TRUE(data.ok()) << data.status();
  std::vector<gpuemu::KernelSignature> signatures;
  for (const auto& src : sources) {
    for (const auto& k : gpuemu::Signatures(src.plan)) signatures.push_back(k);
  }
  auto module = gpuemu::EmuModule::Build(source, signatures, opt);
  EXPECT_TRUE(module.ok()) << module.status().message().substr(0, 4000);
  if (!module.ok() || !data.ok()) return traces;
  std::shared_ptr<gpuemu::EmuModule> shared = std::move(*module);
  for (size_t i = 0; i < sources.size(); ++i) {
    gpuemu::VerifyReport r = gpuemu::VerifyCompiled(sources[i], shared, *data);
    EXPECT_TRUE(r.ok()) << spec << " candidate " << i << ": " << gpuemu::OutcomeName(r.outcome)
                        << ": " << r.message << "\n"
                        << ir::TraceToText(traces[i]);
  }
  return traces;
}

class GpuSpaceOpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuSpaceOpTest, CandidatesReplayAndCompile) {
  SKIP_WITHOUT_NVRTC();
  CheckCandidates(GetParam(), 10, 7);
}

INSTANTIATE_TEST_SUITE_P(Ops, GpuSpaceOpTest, ::testing::ValuesIn(testing::OpTestSpecs()),
                         [](const auto& info) { return testing::OpTestName(info.param); });

// The long variant (label e2e): 50 candidates per op, for sm_80 and sm_90.
class E2eGpuSpaceOpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(E2eGpuSpaceOpTest, FiftyCandidatesReplayAndCompile) {
  SKIP_WITHOUT_NVRTC();
  CheckCandidates(GetParam(), 50, 11, {"sm_80", "sm_90"}, gpuemu::OptLevel::kOptimized);
}

INSTANTIATE_TEST_SUITE_P(Ops, E2eGpuSpaceOpTest, ::testing::ValuesIn(testing::OpTestSpecs()),
                         [](const auto& info) { return testing::OpTestName(info.param); });

// Every sketch rule shows up: local accumulation, shared staging, cross-thread reduction
// (for few outputs with a long reduction), and the generated code says so.
TEST(GpuSpaceTest, SketchRulesAllAppear) {
  SKIP_WITHOUT_NVRTC();
  std::map<std::string, int> seen;
  for (const std::string spec : {"matmul:m=4,n=4,k=2048", "softmax:m=5,n=300"}) {
    std::vector<ir::Trace> traces = CheckCandidates(spec, 24, 3);
    for (const ir::Trace& t : traces) {
      if (HasKind(t, "cache_write", "local")) ++seen["local"];
      if (HasKind(t, "cache_read", "shared")) ++seen["shared"];
      if (HasKind(t, "rfactor")) ++seen["cross"];
    }
  }
  EXPECT_GT(seen["local"], 0);
  EXPECT_GT(seen["shared"], 0);
  EXPECT_GT(seen["cross"], 0);
}

// The shapes bench_cuda tunes (SGEMM 4096^3, a ResNet 3x3 convolution): candidates fit the
// limits and compile; 32-bit indexing suffices.
TEST(GpuSpaceTest, BenchShapesSampleAndCompile) {
  SKIP_WITHOUT_NVRTC();
  CheckCandidates("matmul:m=4096,n=4096,k=4096", 4, 2);
  CheckCandidates("conv2d:n=8,c=128,h=28,w=28,k=128,r=3,s=3,pad=1", 4, 2);
}

// The rule-picked SGEMM 4096 candidates for sm_90: first the pipelined FMA template (128x128
// block tiles of 8x8 per thread, cp.async k-tiles in 3 stages); then the loop-tiling rule,
// shaped like a good hand-written kernel (a 128x128 block tile from 16x16 threads of 8x8
// outputs in registers, k-tiles of A and B in shared memory fetched with float4). ptxas
// compiles both without spills within the registers and shared memory of two blocks per SM.
TEST(GpuSpaceTest, RulePickedSgemmIsAHandKernelThatFitsTwoBlocksPerSm) {
  SKIP_WITHOUT_NVRTC();
  auto w = ir::MakeWorkload("matmul:m=4096,n=4096,k=4096");
  ASSERT_TRUE(w.ok());
  auto space = CreateSearchSpace(*w, "cuda:sm_90");
  ASSERT_TRUE(space.ok()) << space.status();
  std::vector<Candidate> picked = (*space)->Heuristic(4);
  ASSERT_GE(picked.size(), 2u);
  EXPECT_EQ(picked[0].sketch, 1) << ir::TraceToText(picked[0].trace);
  EXPECT_TRUE(HasKind(picked[0].trace, "tensorize", codegen::cuda::kContractionFmaAsync))
      << ir::TraceToText(picked[0].trace);
  {
    auto src = codegen::cuda::BuildCudaSource(*picked[0].schedule, "sgemm");
    ASSERT_TRUE(src.ok()) << src.status();
    const codegen::cuda::KernelLaunch& k = src->plan.kernels.at(0);
    EXPECT_EQ(k.threads_per_block(), 256);
    EXPECT_EQ(k.grid[0] * k.grid[1] * k.grid[2], (4096 / 128) * (4096 / 128));
    EXPECT_GE(k.dynamic_shared_bytes, 3 * 2 * 128 * 16 * 4);  // 3 stages of 16-deep k-tiles
    auto cubin = codegen::cuda::CompileToCubinWithResources(src->source, "sm_90");
    ASSERT_TRUE(cubin.ok()) << cubin.status();
    ASSERT_EQ(cubin->kernels.size(), 1u);
    const codegen::cuda::KernelResources& r = cubin->kernels[0];
    EXPECT_EQ(r.spill_stores + r.spill_loads, 0) << r.registers << " registers";
    auto sm = codegen::cuda::SmResourcesFor("sm_90");
    ASSERT_TRUE(sm.ok());
    EXPECT_GE(
        codegen::cuda::OccupancyOf(*sm, 256, r.registers, r.shared_bytes + k.dynamic_shared_bytes)
            .blocks_per_sm,
        2);
    std::printf("rule-picked SGEMM 4096 (sm_90), first: %s\n",
                codegen::cuda::ResourcesText(src->plan, cubin->kernels, *sm).c_str());
  }
  const ir::Trace& t = picked[1].trace;
  EXPECT_TRUE(HasKind(t, "cache_write", "local"));
  int staged = 0;
  for (const ir::Instruction& i : t.instructions) staged += i.kind == "cache_read";
  EXPECT_EQ(staged, 2) << ir::TraceToText(t);
  EXPECT_TRUE(HasKind(t, "vectorize")) << ir::TraceToText(t);
  auto src = codegen::cuda::BuildCudaSource(*picked[1].schedule, "sgemm");
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ(src->plan.kernels.size(), 1u);
  const codegen::cuda::KernelLaunch& k = src->plan.kernels[0];
  EXPECT_EQ(k.threads_per_block(), 256);
  EXPECT_EQ(k.grid[0] * k.grid[1] * k.grid[2], (4096 / 128) * (4096 / 128));
  EXPECT_GE(k.shared_bytes, 2 * 128 * 16 * 4);  // a 16-deep k-tile of A and of B
  EXPECT_NE(src->source.find(" C_local[64];"), std::string::npos) << "8x8 per thread";
  EXPECT_NE(src->source.find("float4"), std::string::npos);
  auto cubin = codegen::cuda::CompileToCubinWithResources(src->source, "sm_90");
  ASSERT_TRUE(cubin.ok()) << cubin.status();
  ASSERT_EQ(cubin->kernels.size(), 1u);
  const codegen::cuda::KernelResources& r = cubin->kernels[0];
  EXPECT_EQ(r.spill_stores + r.spill_loads, 0) << r.registers << " registers";
  auto sm = codegen::cuda::SmResourcesFor("sm_90");
  ASSERT_TRUE(sm.ok());
  codegen::cuda::Occupancy o = codegen::cuda::OccupancyOf(*sm, 256, r.registers, r.shared_bytes);
  EXPECT_GE(o.blocks_per_sm, 2) << r.registers << " registers, " << r.shared_bytes
                                << " bytes shared: " << o.limited_by;
  std::printf("rule-picked SGEMM 4096 (sm_90), second: %s\n",
              codegen::cuda::ResourcesText(src->plan, cubin->kernels, *sm).c_str());
}

// A target with small limits: every candidate fits them.
TEST(GpuSpaceTest, CandidatesFitTheTargetsLimits) {
  auto w = ir::MakeWorkload("matmul:m=64,n=48,k=40,epilogue=bias");
  ASSERT_TRUE(w.ok());
  GpuTarget small;
  small.limits.max_threads_per_block = 64;
  small.limits.max_shared_per_block = 2048;
  small.limits.max_regs_per_thread = 64;
  auto space = CreateGpuSearchSpace(*w, small);
  ASSERT_TRUE(space.ok()) << space.status();
  std::mt19937_64 rng(5);
  for (int i = 0; i < 30; ++i) {
    auto c = (*space)->Sample(rng);
    ASSERT_TRUE(c.ok()) << c.status();
    auto src = codegen::cuda::BuildCudaSource(*c->schedule, "k");
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_TRUE(codegen::cuda::CheckLaunchLimits(src->plan, small.limits).ok());
    for (const auto& k : src->plan.kernels) EXPECT_LE(k.threads_per_block(), 64);
  }
}

TEST(GpuSpaceTest, RejectsForeignTracesAndDecisions) {
  auto w = ir::MakeWorkload("matmul:m=17,n=31,k=13");
  ASSERT_TRUE(w.ok());
  auto gpu = CreateSearchSpace(*w, "cuda:sm_80");
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = CreateSearchSpace(*w, "cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::mt19937_64 rng(1);
  auto cc = (*cpu)->Sample(rng);
  ASSERT_TRUE(cc.ok());
  EXPECT_EQ(cc->trace.target, "cpu");
  EXPECT_FALSE((*gpu)->FromTrace(cc->trace).ok());
  auto gc = (*gpu)->Sample(rng);
  ASSERT_TRUE(gc.ok()) << gc.status();
  Candidate bad = *gc;
  bad.decisions[0] = 12345;
  EXPECT_EQ((*gpu)->Apply(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad.decisions.pop_back();
  EXPECT_EQ((*gpu)->Apply(bad).status().code(), absl::StatusCode::kInvalidArgument);
  ir::Trace tampered = gc->trace;
  tampered.instructions.pop_back();
  EXPECT_FALSE((*gpu)->FromTrace(tampered).ok());
}

TEST(SpaceFactoryTest, PicksTheSpaceByTarget) {
  auto w = ir::MakeWorkload("softmax:m=5,n=17");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(CreateSearchSpace(*w, "tpu").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateSearchSpace(*w, "cuda:sm_1x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GpuTargetFor(ir::Target{}).status().code(), absl::StatusCode::kInvalidArgument)
      << "cpu is no cuda target";
  auto t = GpuTargetFor(Parsed("cuda:sm_80"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->arch, "sm_80");
  EXPECT_EQ(t->limits.max_threads_per_block, 1024);
  if (codegen::cuda::CudaDriver::Get().ok()) return;  // a device may be present
  auto dev = CreateSearchSpace(*w, "cuda:0");
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kFailedPrecondition) << dev.status();
  EXPECT_NE(dev.status().message().find("driver"), std::string::npos) << dev.status();
}

// "cuda-emu:sm_XX", the GPU emulator: its own device class, the GPU space of the architecture.
TEST(SpaceFactoryTest, TheEmulatedGpuIsItsOwnDeviceClass) {
  auto w = ir::MakeWorkload("matmul:m=17,n=31,k=13");
  ASSERT_TRUE(w.ok());
  auto space = CreateSearchSpace(*w, "cuda-emu:sm_90");
  ASSERT_TRUE(space.ok()) << space.status();
  std::mt19937_64 rng(3);
  auto c = (*space)->Sample(rng);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->trace.target, "cuda");
  auto by_class = SpaceForDeviceClass(*w, "cuda-emu:sm_80");
  ASSERT_TRUE(by_class.ok()) << by_class.status();
  EXPECT_TRUE((*by_class)->FromTrace(c->trace).ok());
  EXPECT_EQ(CreateSearchSpace(*w, "cuda-emu:90").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SpaceFactoryTest, TargetsOfLocalTuning) {
  auto cpu = DeviceClassForTarget(Parsed("cpu"));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->rfind("cpu", 0), 0u) << *cpu;
  EXPECT_EQ(GpuOrdinalForTarget(Parsed("cpu")).status().code(), absl::StatusCode::kInvalidArgument);
  if (codegen::cuda::CudaDriver::Get().ok()) {
    auto dc = DeviceClassForTarget(Parsed("cuda"));
    if (dc.ok()) {
      EXPECT_EQ(dc->rfind("cuda:", 0), 0u) << *dc;
    }
    return;
  }
  for (const std::string t : {"cuda", "cuda:1", "cuda:sm_90"}) {
    EXPECT_EQ(GpuOrdinalForTarget(Parsed(t)).status().code(), absl::StatusCode::kFailedPrecondition)
        << t;
    auto dc = DeviceClassForTarget(Parsed(t));
    EXPECT_EQ(dc.status().code(), absl::StatusCode::kFailedPrecondition) << t;
    EXPECT_NE(dc.status().message().find("driver"), std::string::npos) << dc.status();
  }
}

// What the rule picks first where the work cannot fill the GPU with register tiles (measured on
// an H100 in session 18: PP-OCR's layers at batch 1): a cross-thread reduction for few outputs
// of long reductions (rec's softmax over 6625 classes, det's global average pool), the flat
// mapping for small convolutions and matmuls; a contraction tile of at least one block per SM
// for a large convolution.
TEST(GpuSpaceTest, RuleFitsTheWorkToTheGpu) {
  auto first = [](const std::string& spec) {
    auto w = ir::MakeWorkload(spec);
    EXPECT_TRUE(w.ok()) << w.status();
    auto space = CreateSearchSpace(*w, "cuda:sm_90");
    EXPECT_TRUE(space.ok()) << space.status();
    std::vector<Candidate> picked = (*space)->Heuristic(3);
    EXPECT_FALSE(picked.empty()) << spec;
    return picked.empty() ? Candidate() : picked[0];
  };
  // Long reductions read along their innermost dimension of extent > 1 (an SE block's 1x1
  // convolution over a 1x1 image reads its channels consecutively): cross-thread.
  for (const char* spec : {"softmax:m=40,n=6625", "matmul:m=1,n=1000,k=512,epilogue=bias",
                           "pool2d:n=1,c=96,h=160,w=160,r=160,s=160,kind=avg,stride=1",
                           "conv2d:n=1,c=384,h=1,w=1,k=96,r=1,s=1,epilogue=bias_relu"}) {
    Candidate c = first(spec);
    EXPECT_TRUE(HasKind(c.trace, "rfactor")) << spec << "\n" << ir::TraceToText(c.trace);
  }
  // Short reductions (K 24) and few outputs (4800): one output per thread.
  for (const char* spec :
       {"conv2d:n=1,c=24,h=160,w=160,k=96,r=1,s=1", "matmul:m=40,n=120,k=240,epilogue=bias"}) {
    Candidate c = first(spec);
    EXPECT_EQ(c.sketch, 2) << spec << ": the flat mapping\n" << ir::TraceToText(c.trace);
  }
  // Too small to fill the SMs with LargeContraction's tiles, large enough in every dimension
  // for a register tile (PP-OCR det's 3x3 96 -> 24 at 160x160 and 1x1 192 -> 42 at 40x40: 0.19
  // -> 0.09 ms and 0.043 -> 0.014 ms against the flat mapping on an H200): the contraction.
  for (const char* spec : {"conv2d:n=1,c=96,h=160,w=160,k=24,r=3,s=3,pad=1",
                           "conv2d:n=1,c=192,h=40,w=40,k=42,r=1,s=1,epilogue=bias"}) {
    Candidate c = first(spec);
    EXPECT_EQ(c.sketch, 1) << spec << ": the contraction\n" << ir::TraceToText(c.trace);
  }
  // Few outputs of a long reduction along the channels (rec's 1x3 convolution: cross-thread
  // along the channels lost 8x on the H100, the flat mapping walks 2880 products per thread):
  // split-K, partial sums of enough blocks to fill the SMs, then their sum.
  {
    Candidate c = first("conv2d:n=1,c=960,h=1,w=40,k=60,r=1,s=3,pad=0x1");
    EXPECT_EQ(c.sketch, 1) << ir::TraceToText(c.trace);
    ASSERT_NE(c.schedule, nullptr);
    auto src = codegen::cuda::BuildCudaSource(*c.schedule, "split");
    ASSERT_TRUE(src.ok()) << src.status();
    ASSERT_EQ(src->plan.kernels.size(), 2u);
    const codegen::cuda::KernelLaunch& k = src->plan.kernels[0];
    EXPECT_GE(k.grid[0] * k.grid[1] * k.grid[2], 132);
  }
  Candidate conv = first("conv2d:n=8,c=128,h=28,w=28,k=128,r=3,s=3,pad=1");
  EXPECT_EQ(conv.sketch, 1) << ir::TraceToText(conv.trace);
  ASSERT_NE(conv.schedule, nullptr);
  auto src = codegen::cuda::BuildCudaSource(*conv.schedule, "conv");
  ASSERT_TRUE(src.ok()) << src.status();
  const codegen::cuda::KernelLaunch& k = src->plan.kernels.at(0);
  EXPECT_GE(k.grid[0] * k.grid[1] * k.grid[2], 132);
}

}  // namespace
}  // namespace lathe::tuner

#endif  // LATHE_GPU_SPACE_TEST
