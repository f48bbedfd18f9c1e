// The GPU space's contraction sketch (codegen/cuda/contraction.h), no GPU needed: matmuls and
// convolutions are matched as GEMMs (rows, columns, batch, K); every tile shape of the fp32
// FMA template and of the TF32 tensor-core template compiles through NVRTC for sm_80 and
// sm_90 and agrees with the reference on the GPU emulator (the TF32 one within the TF32
// tolerance, and not exactly: its operands really are rounded); the rule of a convolution is
// the implicit GEMM; TF32 is offered only when the target allows it.
//
// Globbed into tuner_test too, where it compiles to nothing (see gpu_space_test.cc).
#ifdef LATHE_GPU_SPACE_TEST

#include <gtest/gtest.h>

#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "codegen/cuda/contraction.h"
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/cuda/resources.h"
#include "gpuemu/host_compiler.h"
#include "gpuemu/verify.h"
#include "ir/schedule.h"
#include "proto/trace_io.h"
#include "tuner/gpu_space.h"

namespace lathe::tuner {
namespace {

namespace cuda = codegen::cuda;

bool Tensorized(const ir::Trace& t, const std::string& tmpl) {
  for (const ir::Instruction& i : t.instructions) {
    if (i.kind == "tensorize" && i.tag == tmpl) return true;
  }
  return false;
}

// Tensorized with a TF32 tensor-core template (register-staged or pipelined).
bool UsesTf32(const ir::Trace& t) {
  return Tensorized(t, cuda::kContractionMmaTf32) || Tensorized(t, cuda::kContractionMmaTf32Async);
}

std::unique_ptr<SearchSpace> Space(const ir::Workload& w, bool tf32) {
  GpuTarget t;
  t.tf32 = tf32;
  auto s = CreateGpuSearchSpace(w, t);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// Every variant of the contraction sketch of `spec` (fp32 and, with `tf32`, the tensor-core
// ones): compiled together by NVRTC for sm_80 and sm_90 and in one emulator module, each run
// against the reference. Returns the largest error of a TF32 variant (0 without).
double VerifyAllVariants(const std::string& spec, bool tf32) {
  auto w = ir::MakeWorkload(spec);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return 0;
  auto space = Space(*w, tf32);
  if (!space) return 0;
  EXPECT_EQ(space->num_sketches(), 3) << spec;
  std::vector<cuda::CudaSource> sources;
  std::vector<bool> is_mma;
  std::string kernels;
  for (int64_t v = 0;; ++v) {
    Candidate c;
    c.sketch = 1;
    c.decisions = {v};
    auto sch = space->Apply(c);
    if (!sch.ok()) break;  // past the last variant
    // The trace replays (JSON round trip) into the same candidate.
    auto again = space->FromTrace([&] {
      ir::Trace t = sch->trace();
      t.sketch = 1;
      t.decisions = c.decisions;
      return *traceio::TraceFromJson(traceio::TraceToJson(t));
    }());
    EXPECT_TRUE(again.ok()) << again.status();
    auto src = cuda::BuildCudaSource(*sch, "v" + std::to_string(v));
    EXPECT_TRUE(src.ok()) << spec << " variant " << v << ": " << src.status();
    if (!src.ok()) continue;
    is_mma.push_back(UsesTf32(sch->trace()));
    kernels += src->kernels;
    sources.push_back(std::move(*src));
  }
  EXPECT_GE(sources.size(), 8u) << spec;
  const std::string source = cuda::CudaPrelude() + kernels;
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = cuda::CompileToCubin(source, arch);
    EXPECT_TRUE(cubin.ok()) << spec << " " << arch << ": "
                            << cubin.status().message().substr(0, 4000);
  }
  if (!gpuemu::FindHostCompiler().ok()) return 0;
  auto data = gpuemu::MakeReferenceData(*w);
  EXPECT_TRUE(data.ok()) << data.status();
  std::vector<gpuemu::KernelSignature> sigs;
  for (const auto& s : sources) {
    for (const auto& k : gpuemu::Signatures(s.plan)) sigs.push_back(k);
  }
  auto module = gpuemu::EmuModule::Build(source, sigs);
  EXPECT_TRUE(module.ok()) << module.status().message().substr(0, 4000);
  if (!module.ok() || !data.ok()) return 0;
  std::shared_ptr<gpuemu::EmuModule> shared = std::move(*module);
  double worst_tf32 = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    gpuemu::VerifyOptions vo;
    vo.tolerance = is_mma[i] ? gpuemu::kTf32Tolerance : ir::kDefaultTolerance;
    gpuemu::VerifyReport r = gpuemu::VerifyCompiled(sources[i], shared, *data, vo);
    EXPECT_TRUE(r.ok()) << spec << " variant " << i << ": " << gpuemu::OutcomeName(r.outcome)
                        << ": " << r.message << "\n"
                        << sources[i].kernels.substr(0, 6000);
    if (is_mma[i]) worst_tf32 = std::max(worst_tf32, r.compare.rel_error);
  }
  return worst_tf32;
}

#define SKIP_WITHOUT_NVRTC() \
  if (!cuda::HaveNvrtc()) GTEST_SKIP() << "this build has no NVRTC"

TEST(ContractionTest, MatchesMatmulsAndConvolutionsAsGemms) {
  auto mm = ir::MakeWorkload("matmul:m=17,n=31,k=13,epilogue=bias_relu");
  ASSERT_TRUE(mm.ok());
  ir::Schedule s(*mm, "cuda");
  auto c = cuda::MatchContraction(s, "matmul");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->m, 17);
  EXPECT_EQ(c->n, 31);
  EXPECT_EQ(c->k, 13);
  EXPECT_EQ(c->epilogue, "C");
  auto conv = ir::MakeWorkload("conv2d:n=2,c=4,h=11,w=7,k=6,r=3,s=3,pad=1");
  ASSERT_TRUE(conv.ok());
  ir::Schedule cs(*conv, "cuda");
  const ir::Schedule untouched(*conv, "cuda");
  for (const ir::Stage& st : untouched.stages()) {
    if (st.tensor->tag == "pad") {
      ASSERT_TRUE(cs.ComputeInline(st.name).ok());
    }
  }
  auto cc = cuda::MatchContraction(cs, "Y");
  ASSERT_TRUE(cc.ok()) << cc.status();
  // Pixels n*oh*ow as the columns (the output's innermost axis), output channels as the rows,
  // channels x window as K.
  EXPECT_EQ(cc->n, 2 * 11 * 7);
  EXPECT_EQ(cc->m, 6);
  EXPECT_EQ(cc->k, 4 * 3 * 3);
  // A depthwise convolution has no rows: its channels index both operands.
  auto dw = ir::MakeWorkload("conv2d:n=1,c=8,h=10,w=10,k=8,r=3,s=3,pad=1,groups=8");
  ASSERT_TRUE(dw.ok());
  auto dws = Space(*dw, true);
  ASSERT_NE(dws, nullptr);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 40; ++i) {
    auto c = dws->Sample(rng);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_NE(c->sketch, 1) << "a depthwise convolution has no contraction sketch";
  }
  for (const Candidate& c : dws->Heuristic(8)) EXPECT_NE(c.sketch, 1);
}

// The tensorize primitive: only on an untransformed reduction of a cuda schedule; the stage
// takes no primitive after it; its trace replays.
TEST(ContractionTest, TensorizeMarksAnUntransformedCudaReduction) {
  auto w = ir::MakeWorkload("matmul:m=17,n=31,k=13,epilogue=bias");
  ASSERT_TRUE(w.ok());
  ir::Schedule cpu(*w);
  EXPECT_FALSE(cpu.Tensorize("matmul", cuda::kContractionFma, {64, 64, 8, 4, 4}).ok());
  ir::Schedule split(*w, "cuda");
  ASSERT_TRUE(split.Split("matmul", "i", {4}).ok());
  EXPECT_FALSE(split.Tensorize("matmul", cuda::kContractionFma, {64, 64, 8, 4, 4}).ok());
  ir::Schedule s(*w, "cuda");
  EXPECT_FALSE(s.Tensorize("C", cuda::kContractionFma, {64, 64, 8, 4, 4}).ok())
      << "not a reduction";
  ASSERT_TRUE(s.Tensorize("matmul", cuda::kContractionFma, {64, 64, 8, 4, 4}).ok());
  EXPECT_FALSE(s.Split("matmul", "i", {4}).ok());
  EXPECT_FALSE(s.Tensorize("matmul", cuda::kContractionFma, {64, 64, 8, 4, 4}).ok());
  auto again = ir::ApplyTrace(*w, *traceio::TraceFromJson(traceio::TraceToJson(s.trace())));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->FindStage("matmul")->tensorize, cuda::kContractionFma);
  EXPECT_EQ(again->trace(), s.trace());
  // Bad parameters are the generator's to refuse.
  ir::Schedule bad(*w, "cuda");
  ASSERT_TRUE(bad.Tensorize("matmul", cuda::kContractionMmaTf32, {64, 64, 12, 2, 2}).ok());
  EXPECT_EQ(cuda::BuildCudaSource(bad, "k").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(cuda::CheckContractionParams(cuda::kContractionFma, {64, 64, 8, 4, 4, 2}).ok());
  EXPECT_TRUE(cuda::CheckContractionParams(cuda::kContractionFma, {64, 64, 8, 4, 4, 1}).ok());
}

TEST(ContractionTest, Tf32IsOfferedOnlyWhenAllowed) {
  auto w = ir::MakeWorkload("matmul:m=64,n=48,k=40");
  ASSERT_TRUE(w.ok());
  auto fp32 = Space(*w, false);
  std::mt19937_64 rng(4);
  int contractions = 0;
  for (int i = 0; i < 60; ++i) {
    auto c = fp32->Sample(rng);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_FALSE(UsesTf32(c->trace));
    contractions += Tensorized(c->trace, cuda::kContractionFma) ||
                    Tensorized(c->trace, cuda::kContractionFmaAsync);
  }
  EXPECT_GT(contractions, 0);
  // The fp32 rules never use tensor cores; with TF32 the tensor-core GEMM is among them, and
  // first for a GEMM large enough to fill the GPU with its tiles.
  for (const Candidate& c : fp32->Heuristic(8)) EXPECT_FALSE(UsesTf32(c.trace));
  auto tf32 = Space(*w, true);
  bool offered = false;
  for (const Candidate& c : tf32->Heuristic(4)) {
    offered = offered || UsesTf32(c.trace);
  }
  EXPECT_TRUE(offered);
  auto large = ir::MakeWorkload("matmul:m=2048,n=2048,k=2048");
  ASSERT_TRUE(large.ok());
  const Candidate rule = Space(*large, true)->Heuristic(1).at(0);
  // The pipelined (cp.async) template: a GEMM's operands are reads of its arguments.
  EXPECT_TRUE(Tensorized(rule.trace, cuda::kContractionMmaTf32Async))
      << ir::TraceToText(rule.trace);
  // A TF32 trace is not a candidate of the fp32 space.
  EXPECT_FALSE(Space(*large, false)->FromTrace(rule.trace).ok());
}

TEST(ContractionTest, TheRuleOfAConvolutionIsTheImplicitGemm) {
  auto w = ir::MakeWorkload("conv2d:n=8,c=128,h=28,w=28,k=128,r=3,s=3,pad=1");
  ASSERT_TRUE(w.ok());
  const Candidate rule = Space(*w, false)->Heuristic(1).at(0);
  // The pipelined FMA template, 64x32 tiles (392 blocks spread evenly over 132 SMs, where
  // 64x64's 196 leave 64 SMs with two). K runs window-outermost (the padding guard and the
  // window shared by a k-tile of channels), so the gathered input and the weights are both
  // copied 4 bytes at a time.
  EXPECT_TRUE(Tensorized(rule.trace, cuda::kContractionFmaAsync)) << ir::TraceToText(rule.trace);
  auto src = cuda::BuildCudaSource(*rule.schedule, "conv");
  ASSERT_TRUE(src.ok()) << src.status();
  const cuda::KernelLaunch& k = src->plan.kernels.at(0);
  EXPECT_EQ(k.threads_per_block(), 128);
  EXPECT_EQ(k.grid[0] * k.grid[1] * k.grid[2], 392);
  EXPECT_NE(src->kernels.find("A k-fast x1, B n-fast x1"), std::string::npos) << src->kernels;
  EXPECT_NE(src->kernels.find("_base + kk;"), std::string::npos) << src->kernels;
}

TEST(ContractionTest, Tf32GemmUsesMmaSync) {
  SKIP_WITHOUT_NVRTC();
  auto w = ir::MakeWorkload("matmul:m=2048,n=2048,k=2048");
  ASSERT_TRUE(w.ok());
  const Candidate rule = Space(*w, true)->Heuristic(1).at(0);
  auto src = cuda::BuildCudaSource(*rule.schedule, "tc");
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_NE(src->source.find("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
            std::string::npos);
  auto ptx = cuda::CompileToPtx(src->source, "sm_90");
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"), std::string::npos);
  // Rounded to TF32 by an integer add on the bits (the tensor core truncates), not cvt.rna.
  EXPECT_EQ(ptx->find("cvt.rna.tf32.f32"), std::string::npos);
  // Both operands copied 16 bytes at a time, global -> shared, STAGES - 2 groups in flight.
  EXPECT_NE(ptx->find("cp.async.cg.shared.global"), std::string::npos);
  EXPECT_NE(ptx->find("cp.async.wait_group 1"), std::string::npos);
  EXPECT_EQ(ptx->find("cp.async.ca.shared.global"), std::string::npos);
}

// Few outputs of a long reduction (PP-OCR rec's 1x3 convolution over 960 channels: 2400
// outputs, K = 2880): the rule splits K (a kernel of partial sums into a temporary, a second
// one summing them), before the flat mapping; fp32 and TF32 agree with the reference on the
// emulator, and ptxas (sm_90) reports no spills.
TEST(ContractionTest, FewOutputsOfALongReductionSplitK) {
  SKIP_WITHOUT_NVRTC();
  auto w = ir::MakeWorkload("conv2d:n=1,c=960,h=1,w=40,k=60,r=1,s=3,pad=0x1,epilogue=bias");
  ASSERT_TRUE(w.ok()) << w.status();
  auto data = gpuemu::MakeReferenceData(*w);
  ASSERT_TRUE(data.ok()) << data.status();
  for (bool tf32 : {false, true}) {
    const Candidate rule = Space(*w, tf32)->Heuristic(1).at(0);
    ASSERT_EQ(rule.sketch, 1) << ir::TraceToText(rule.trace);
    auto src = cuda::BuildCudaSource(*rule.schedule, "split");
    ASSERT_TRUE(src.ok()) << src.status();
    ASSERT_EQ(src->plan.kernels.size(), 2u) << cuda::ToText(src->plan);
    ASSERT_EQ(src->plan.temporaries.size(), 1u);
    EXPECT_GE(
        src->plan.kernels[0].grid[0] * src->plan.kernels[0].grid[1] * src->plan.kernels[0].grid[2],
        64)
        << cuda::ToText(src->plan);
    gpuemu::VerifyOptions vo;
    vo.arch = "sm_90";
    vo.tolerance = tf32 ? gpuemu::kTf32Tolerance : ir::kDefaultTolerance;
    gpuemu::VerifyReport r = gpuemu::VerifySchedule(*rule.schedule, *data, vo);
    if (r.outcome == gpuemu::Outcome::kUnavailable) GTEST_SKIP() << r.message;
    EXPECT_TRUE(r.ok()) << gpuemu::OutcomeName(r.outcome) << ": " << r.message;
    for (const cuda::KernelResources& k : r.resources) {
      EXPECT_EQ(k.spill_stores + k.spill_loads, 0) << k.name << " " << r.resources_text;
    }
  }
}

// The rules' pipelined kernels at the sizes bench_cuda measures, as ptxas (sm_90) builds them:
// no spills, two resident blocks per SM (the register and shared-memory budget of the tiles).
TEST(ContractionTest, PipelinedKernelsFitTwoBlocksPerSm) {
  SKIP_WITHOUT_NVRTC();
  auto sm = cuda::SmResourcesFor("sm_90");
  ASSERT_TRUE(sm.ok());
  for (const auto& [spec, tf32, tmpl] : std::vector<std::tuple<std::string, bool, std::string>>{
           {"matmul:m=4096,n=4096,k=4096", false, cuda::kContractionFmaAsync},
           {"matmul:m=4096,n=4096,k=4096", true, cuda::kContractionMmaTf32Async},
           {"conv2d:n=8,c=128,h=28,w=28,k=128,r=3,s=3,pad=1", false, cuda::kContractionFmaAsync},
           {"conv2d:n=8,c=128,h=28,w=28,k=128,r=3,s=3,pad=1", true,
            cuda::kContractionMmaTf32Async}}) {
    auto w = ir::MakeWorkload(spec);
    ASSERT_TRUE(w.ok());
    const Candidate rule = Space(*w, tf32)->Heuristic(1).at(0);
    EXPECT_TRUE(Tensorized(rule.trace, tmpl)) << spec << ": " << ir::TraceToText(rule.trace);
    auto src = cuda::BuildCudaSource(*rule.schedule, "k");
    ASSERT_TRUE(src.ok()) << src.status();
    auto cubin = cuda::CompileToCubinWithResources(src->source, "sm_90");
    ASSERT_TRUE(cubin.ok()) << cubin.status();
    if (cubin->kernels.empty()) GTEST_SKIP() << "this NVRTC gives no ptxas report";
    EXPECT_TRUE(cuda::CheckKernelResources(src->plan, cubin->kernels, *sm).ok());
    const cuda::KernelResources& r = cubin->kernels.at(0);
    EXPECT_EQ(r.spill_stores + r.spill_loads, 0) << spec << ": " << r.registers << " registers";
    const cuda::KernelLaunch& k = src->plan.kernels.at(0);
    const cuda::Occupancy o = cuda::OccupancyOf(*sm, k.threads_per_block(), r.registers,
                                                r.shared_bytes + k.dynamic_shared_bytes);
    EXPECT_GE(o.blocks_per_sm, tf32 && spec[0] == 'm' ? 1 : 2)
        << spec << ": " << cuda::ResourcesText(src->plan, cubin->kernels, *sm);
    std::cout << spec << (tf32 ? " tf32: " : ": ") << ir::TraceToText(rule.trace)
              << cuda::ResourcesText(src->plan, cubin->kernels, *sm) << "\n";
  }
}

// The emulator proves the pipeline's synchronization, not only its arithmetic: the pipelined
// TF32 kernel with its wait_group allowing one group too many in flight (a k-tile read before
// it landed), or without the barrier that ends the reads of a stage before it is refilled,
// gives a wrong answer (NaN: what a copy's destination holds until its group is waited for).
TEST(ContractionTest, TheEmulatorCatchesABrokenPipeline) {
  SKIP_WITHOUT_NVRTC();
  if (!gpuemu::FindHostCompiler().ok()) GTEST_SKIP() << "no host compiler";
  auto w = ir::MakeWorkload("matmul:m=64,n=64,k=256");
  ASSERT_TRUE(w.ok());
  ir::Schedule sch(*w, "cuda");
  ASSERT_TRUE(sch.Tensorize("C", cuda::kContractionMmaTf32Async, {64, 64, 32, 2, 2, 3}).ok());
  auto src = cuda::BuildCudaSource(sch, "pipe");
  ASSERT_TRUE(src.ok()) << src.status();
  auto data = gpuemu::MakeReferenceData(*w);
  ASSERT_TRUE(data.ok()) << data.status();
  auto verify = [&](const std::string& from, const std::string& to) {
    cuda::CudaSource broken = *src;
    const size_t at = broken.kernels.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) broken.kernels.replace(at, from.size(), to);
    broken.source = broken.prelude + broken.kernels;
    auto module = gpuemu::EmuModule::Build(broken.source, gpuemu::Signatures(broken.plan));
    EXPECT_TRUE(module.ok()) << module.status();
    gpuemu::VerifyOptions vo;
    vo.tolerance = gpuemu::kTf32Tolerance;
    return gpuemu::VerifyCompiled(broken, std::move(*module), *data, vo);
  };
  EXPECT_TRUE(verify("", "").ok()) << "the kernel as generated";
  gpuemu::VerifyReport early = verify("lathe_cp_async_wait(1);", "lathe_cp_async_wait(2);");
  EXPECT_EQ(early.outcome, gpuemu::Outcome::kWrongAnswer) << early.message;
  gpuemu::VerifyReport unfenced = verify("    __syncthreads();\n", "");
  EXPECT_EQ(unfenced.outcome, gpuemu::Outcome::kWrongAnswer) << unfenced.message;
}

class ContractionVariantsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ContractionVariantsTest, EveryTileShapeAgreesOnTheEmulator) {
  SKIP_WITHOUT_NVRTC();
  const double tf32_error = VerifyAllVariants(GetParam(), true);
  // TF32 is not fp32: the emulated tensor core rounded its operands.
  if (gpuemu::FindHostCompiler().ok()) {
    EXPECT_GT(tf32_error, 1e-6) << GetParam();
  }
}

std::string ParamName(const ::testing::TestParamInfo<std::string>& info) {
  std::string n;
  for (char ch : info.param) n += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Shapes, ContractionVariantsTest,
                         ::testing::Values("matmul:m=96,n=80,k=72",
                                           "conv2d:n=2,c=4,h=11,w=7,k=6,r=3,s=3,pad=1",
                                           "conv2d:n=1,c=4,h=8,w=8,k=8,r=3,s=3,pad=1,layout=nhwc"),
                         ParamName);

// The other shapes (label e2e: 5-20 s each on a loaded 2-core host).
class E2eContractionVariantsTest : public ContractionVariantsTest {};

TEST_P(E2eContractionVariantsTest, EveryTileShapeAgreesOnTheEmulator) {
  SKIP_WITHOUT_NVRTC();
  const double tf32_error = VerifyAllVariants(GetParam(), true);
  if (gpuemu::FindHostCompiler().ok()) {
    EXPECT_GT(tf32_error, 1e-6) << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, E2eContractionVariantsTest,
    ::testing::Values("matmul:m=17,n=31,k=13,epilogue=bias_relu",
                      "matmul:m=9,n=17,k=12,transpose_b=1,epilogue=bias_res",
                      "matmul:m=9,n=32,k=12,bpanel=16,epilogue=bias_gelu",
                      "batch_matmul:b=3,m=5,n=7,k=11", "batch_matmul:b=2,m=5,n=6,k=7,bcast=b",
                      "conv2d:n=1,c=8,h=13,w=13,k=8,r=3,s=3,stride=2,pad=1,dilation=2",
                      "conv2d:n=1,c=8,h=5,w=5,k=16,r=1,s=1,epilogue=bias_gelu",
                      "conv2d:n=1,c=3,h=6,w=9,k=5,r=1,s=3,stride=1x2,pad=0x1x0x1,"
                      "epilogue=bias_clip0:6_res"),
    ParamName);

}  // namespace
}  // namespace lathe::tuner

#endif  // LATHE_GPU_SPACE_TEST
