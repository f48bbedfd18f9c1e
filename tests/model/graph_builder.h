// \file
// Test helpers of the model compiler's tests: graphs built by hand (GraphBuilder), a program
// run with naive schedules on deterministic inputs, and a close-enough comparison.
#ifndef LATHE_TESTS_MODEL_GRAPH_BUILDER_H_
#define LATHE_TESTS_MODEL_GRAPH_BUILDER_H_

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/compile.h"
#include "model/executor.h"
#include "model/infer.h"
#include "model/plan.h"

namespace lathe::model {

class GraphBuilder {
 public:
  GraphBuilder() { g_.opset = 13; }
  std::string Input(const std::string& name, std::vector<int64_t> shape) {
    g_.values[name] = Value{name, std::move(shape), false, std::nullopt};
    g_.inputs.push_back(name);
    return name;
  }
  std::string Const(const std::string& name, std::vector<int64_t> shape, float lo = -1,
                    float hi = 1) {
    ConstData d;
    std::uniform_real_distribution<float> dist(lo, hi);
    for (int64_t i = 0; i < NumElements(shape); ++i) d.f.push_back(dist(rng_));
    return g_.AddConst(name, std::move(shape), std::move(d));
  }
  std::string Values(const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
    ConstData d;
    d.f = std::move(v);
    return g_.AddConst(name, std::move(shape), std::move(d));
  }
  std::string Scalar(const std::string& name, float v) {
    ConstData d;
    d.f = {v};
    return g_.AddConst(name, {}, std::move(d));
  }
  std::string Op(const std::string& op, std::vector<std::string> in,
                 std::map<std::string, Attr> attrs = {}) {
    Node n;
    n.op = op;
    n.name = op + "_" + std::to_string(g_.nodes.size());
    n.inputs = std::move(in);
    n.outputs = {n.name + ".out"};
    n.attrs = std::move(attrs);
    g_.nodes.push_back(n);
    return n.outputs[0];
  }
  Graph Finish(const std::string& out) {
    g_.outputs = {out};
    EXPECT_TRUE(InferAndFold(g_).ok());
    return g_;
  }

 private:
  Graph g_;
  std::mt19937 rng_{7};
};

inline Attr Ints(std::vector<int64_t> v) {
  Attr a;
  a.kind = Attr::kInts;
  a.ints = std::move(v);
  return a;
}

// Runs a program with default (naive) schedules on deterministic inputs.
inline std::vector<float> RunProgram(const Program& p) {
  absl::StatusOr<Plan> plan = MakePlan(p);
  EXPECT_TRUE(plan.ok()) << plan.status();
  std::unique_ptr<ScheduleSource> naive = DatabaseSchedules(nullptr, "", nullptr);
  auto m = CompiledModel::Create(*plan, *naive, 1);
  EXPECT_TRUE(m.ok()) << m.status();
  std::vector<std::vector<float>> in;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-2, 2);
  for (const IoInfo& io : plan->inputs) {
    in.emplace_back(NumElements(io.shape));
    for (float& v : in.back()) v = dist(rng);
  }
  std::vector<float> out(NumElements(plan->outputs[0].shape));
  std::vector<const float*> ip;
  for (auto& v : in) ip.push_back(v.data());
  float* op = out.data();
  EXPECT_TRUE((*m)->Run(ip.data(), &op).ok());
  return out;
}

inline void ExpectClose(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  double scale = 1e-6, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  EXPECT_LE(err, 1e-4 * scale);
}

}  // namespace lathe::model

#endif  // LATHE_TESTS_MODEL_GRAPH_BUILDER_H_
