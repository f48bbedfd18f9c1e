// ONNX's own conformance cases (Debian libonnx-testdata, data/node/test_*) for the ops lathe
// runs: each imported, compiled, run through lathe (JIT) and compared with the expected outputs
// of the package. kPassing lists the cases that must pass; ConformanceReport tries every case
// of those ops and prints why the others are skipped (unsupported forms), so the list can only
// grow deliberately.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/compile.h"
#include "model/executor.h"
#include "model/onnx_import.h"
#include "model/plan.h"

namespace lathe::model {
namespace {

const char* kNodeDir = "/usr/share/libonnx-testdata/data/node";

bool Exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

bool FrozenParameters(const std::string& name) {
  for (const char* p : {"test_conv", "test_basic_conv", "test_convtranspose", "test_batchnorm",
                        "test_gemm", "test_clip", "test_layer_normalization"}) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

// Runs one case; returns "" when it passed, "skip: why" when lathe does not support it, or
// "FAIL: why".
std::string RunCase(const std::string& name, const CompileOptions& options = {}) {
  const std::string dir = std::string(kNodeDir) + "/" + name;
  const std::string data = dir + "/test_data_set_0";
  std::vector<TensorFile> inputs, outputs;
  std::vector<std::string> frozen;
  std::vector<InputShape> shapes;
  for (int i = 0;; ++i) {
    const std::string f = absl::StrCat(data, "/input_", i, ".pb");
    if (!Exists(f)) break;
    absl::StatusOr<TensorFile> t = ReadTensorFile(f);
    if (!t.ok()) return "skip: " + std::string(t.status().message());
    // Integer inputs (shapes, axes) and the parameters of layers whose parameters real
    // models hold as initializers (weights, statistics, bounds) are frozen into constants.
    if (t->data.is_int || (i > 0 && FrozenParameters(name))) {
      frozen.push_back(f);
      continue;
    }
    shapes.push_back({t->name, t->shape});
    inputs.push_back(*std::move(t));
  }
  for (int i = 0;; ++i) {
    const std::string f = absl::StrCat(data, "/output_", i, ".pb");
    if (!Exists(f)) break;
    absl::StatusOr<TensorFile> t = ReadTensorFile(f);
    if (!t.ok()) return "skip: " + std::string(t.status().message());
    if (t->data.is_int) return "skip: integer output";
    outputs.push_back(*std::move(t));
  }
  absl::StatusOr<Graph> g = ImportOnnxFrozen(dir + "/model.onnx", shapes, frozen);
  if (!g.ok()) return "skip: " + std::string(g.status().message());
  absl::StatusOr<Program> p = CompileGraph(*std::move(g), options);
  if (!p.ok()) {
    return (absl::IsInvalidArgument(p.status()) ? "skip: " : "FAIL: ") +
           std::string(p.status().message());
  }
  absl::StatusOr<Plan> plan = MakePlan(*p);
  if (!plan.ok()) return "FAIL: " + std::string(plan.status().message());
  if (plan->outputs.size() != outputs.size()) return "FAIL: output count differs";
  std::unique_ptr<ScheduleSource> naive = DatabaseSchedules(nullptr, "", nullptr);
  absl::StatusOr<std::unique_ptr<CompiledModel>> m = CompiledModel::Create(*plan, *naive, 1);
  if (!m.ok()) return "FAIL: " + std::string(m.status().message());
  std::vector<const float*> in;
  for (const IoInfo& io : plan->inputs) {
    auto it = std::find_if(inputs.begin(), inputs.end(),
                           [&](const TensorFile& t) { return t.name == io.name; });
    if (it == inputs.end()) return "FAIL: no data for input " + io.name;
    in.push_back(it->data.f.data());
  }
  std::vector<std::vector<float>> got;
  std::vector<float*> out;
  for (const TensorFile& t : outputs) got.emplace_back(t.data.f.size());
  for (auto& v : got) out.push_back(v.data());
  if (absl::Status s = (*m)->Run(in.data(), out.data()); !s.ok()) {
    return "FAIL: " + std::string(s.message());
  }
  for (size_t o = 0; o < outputs.size(); ++o) {
    const std::vector<float>& ref = outputs[o].data.f;
    double scale = 1e-6, err = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
      if (!std::isfinite(got[o][i]) && std::isfinite(ref[i])) return "FAIL: NaN or Inf";
      if (std::isfinite(ref[i]))
        err = std::max(err, std::fabs(static_cast<double>(got[o][i]) - ref[i]));
    }
    if (err > 1e-3 * scale) {
      return absl::StrCat("FAIL: output ", o, " max error ", err, " (max |ref| ", scale, ")");
    }
  }
  return "";
}

// The cases that must pass (every case of these ops that lathe supports; see the report for
// the others and why they are skipped).
const std::vector<std::string>& Passing() {
  static const std::vector<std::string>* cases = new std::vector<std::string>{
#include "conformance_cases.inc"
  };
  return *cases;
}

class ConformanceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ConformanceTest, MatchesExpectedOutputs) {
  if (!Exists(kNodeDir)) GTEST_SKIP() << "libonnx-testdata is not installed";
  const std::string r = RunCase(GetParam());
  EXPECT_EQ(r, "") << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Onnx, ConformanceTest, ::testing::ValuesIn(Passing()),
                         [](const auto& info) { return info.param; });

// The same cases with activations in the blocked layout (blocks of up to 4 channels: the
// cases have few), conversions included.
class BlockedConformanceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BlockedConformanceTest, MatchesExpectedOutputs) {
  if (!Exists(kNodeDir)) GTEST_SKIP() << "libonnx-testdata is not installed";
  CompileOptions o;
  o.block_lanes = 4;
  const std::string r = RunCase(GetParam(), o);
  EXPECT_EQ(r, "") << GetParam();
}

INSTANTIATE_TEST_SUITE_P(OnnxBlocked, BlockedConformanceTest, ::testing::ValuesIn(Passing()),
                         [](const auto& info) { return info.param; });

// The op prefixes lathe runs; every case under them is tried and its result printed.
TEST(ConformanceReport, EveryCaseOfTheSupportedOps) {
  if (!Exists(kNodeDir)) GTEST_SKIP() << "libonnx-testdata is not installed";
  if (!getenv("LATHE_CONFORMANCE_REPORT")) GTEST_SKIP() << "set LATHE_CONFORMANCE_REPORT=1";
  const std::vector<std::string> prefixes = {"test_conv",
                                             "test_basic_conv",
                                             "test_convtranspose",
                                             "test_gemm",
                                             "test_matmul",
                                             "test_maxpool",
                                             "test_averagepool",
                                             "test_globalaveragepool",
                                             "test_globalmaxpool",
                                             "test_softmax",
                                             "test_layer_normalization",
                                             "test_relu",
                                             "test_sigmoid",
                                             "test_hardsigmoid",
                                             "test_hardswish",
                                             "test_clip",
                                             "test_add",
                                             "test_sub",
                                             "test_mul",
                                             "test_div",
                                             "test_pow",
                                             "test_tanh",
                                             "test_exp",
                                             "test_log",
                                             "test_sqrt",
                                             "test_abs",
                                             "test_neg",
                                             "test_reciprocal",
                                             "test_erf",
                                             "test_leakyrelu",
                                             "test_batchnorm",
                                             "test_transpose",
                                             "test_reshape",
                                             "test_flatten",
                                             "test_squeeze",
                                             "test_unsqueeze",
                                             "test_concat",
                                             "test_slice",
                                             "test_split",
                                             "test_resize",
                                             "test_upsample",
                                             "test_reduce_mean",
                                             "test_reduce_sum",
                                             "test_reduce_max",
                                             "test_reduce_min",
                                             "test_identity",
                                             "test_max",
                                             "test_min",
                                             "test_shape",
                                             "test_cast"};
  DIR* d = opendir(kNodeDir);
  ASSERT_NE(d, nullptr);
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  int pass = 0, skip = 0, fail = 0;
  for (const std::string& n : names) {
    bool match = false;
    for (const std::string& p : prefixes) match = match || n.rfind(p, 0) == 0;
    if (!match || n.find("expanded") != std::string::npos) continue;
    const std::string r = RunCase(n);
    if (r.empty()) {
      ++pass;
      std::printf("PASS %s\n", n.c_str());
    } else {
      (r.rfind("skip", 0) == 0 ? skip : fail)++;
      std::printf("%s %s\n", r.rfind("skip", 0) == 0 ? "SKIP" : "FAIL", (n + " " + r).c_str());
    }
  }
  std::printf("conformance: %d pass, %d skipped, %d fail\n", pass, skip, fail);
}

}  // namespace
}  // namespace lathe::model
