#include "bench/model_quality.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <set>

#include "codegen/lower.h"
#include "cost_model/database_io.h"
#include "db/database.h"

namespace lathe::bench {

std::vector<Program> LoadPrograms(const std::string& db_path, bool structural_only) {
  std::vector<Program> out;
  auto database = db::Database::Open(db_path);
  if (!database.ok()) return out;
  auto lower = [&](const db::Record& r) {
    return structural_only
               ? cost_model::LowerTraceJson(r.trace_json, codegen::LowerOptions::StructuralOnly())
               : cost_model::LowerRecordTrace(r.trace_json, r.device_class);
  };
  (void)(*database)->ForEachRecord([&](const db::Record& r) {
    auto f = lower(r);
    if (!f.ok()) return absl::OkStatus();
    auto m = cost_model::ExtractFeatures(*f);
    if (!m.ok()) return absl::OkStatus();
    out.push_back({r.workload_key, std::move(*m),
                   r.error_class == db::ErrorClass::kOk ? r.Gflops() : 0.0, r.trace_json});
    return absl::OkStatus();
  });
  return out;
}

ModelQuality EvaluateHeldOut(const std::map<std::string, std::vector<Program>>& by_workload,
                             const std::map<std::string, std::string>& names,
                             const cost_model::CostModelOptions& options, uint64_t seed) {
  ModelQuality q;
  std::vector<cost_model::FeatureMatrix> train_x, test_x;
  std::vector<double> train_y, test_y;
  std::vector<std::string> train_k, test_k;
  std::mt19937_64 rng(seed);
  for (const auto& [key, all] : by_workload) {
    std::vector<size_t> order(all.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i = 0; i < order.size(); ++i) {
      const Program& p = all[order[i]];
      const bool test = i % 5 == 0;
      (test ? test_x : train_x).push_back(p.features);
      (test ? test_y : train_y).push_back(p.gflops);
      (test ? test_k : train_k).push_back(key);
    }
  }
  cost_model::CostModel model(options);
  const auto t = std::chrono::steady_clock::now();
  absl::Status st = model.Update(train_x, train_y, train_k);
  if (st.ok() && !model.trained()) st = model.Train();
  q.train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  q.trained_on = train_x.size();
  if (!st.ok()) {
    q.error = "training failed: " + st.ToString();
    return q;
  }
  auto scores = model.Predict(test_x);
  if (!scores.ok()) {
    q.error = "prediction failed: " + scores.status().ToString();
    return q;
  }
  double acc_sum = 0;
  for (const auto& [key, name] : names) {
    std::vector<float> s, l;
    for (size_t i = 0; i < test_x.size(); ++i) {
      if (test_k[i] != key) continue;
      s.push_back((*scores)[i]);
      l.push_back(static_cast<float>(test_y[i]));
    }
    if (s.size() < 2) continue;
    WorkloadQuality wq;
    wq.name = name;
    wq.held_out = s.size();
    wq.pairwise = cost_model::PairwiseAccuracy(s, l);
    std::vector<size_t> by_true(s.size()), by_pred(s.size());
    std::iota(by_true.begin(), by_true.end(), 0);
    std::iota(by_pred.begin(), by_pred.end(), 0);
    std::sort(by_true.begin(), by_true.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
    std::sort(by_pred.begin(), by_pred.end(), [&](size_t a, size_t b) { return s[a] > s[b]; });
    float best_pred = 0;
    const size_t ks[3] = {1, 5, 10};
    for (int r = 0; r < 3; ++r) {
      const size_t k = ks[r];
      if (k > s.size()) {
        wq.recall[r] = -1;
        continue;
      }
      std::set<size_t> truth(by_true.begin(), by_true.begin() + static_cast<ptrdiff_t>(k));
      int hit = 0;
      for (size_t j = 0; j < k; ++j) {
        hit += static_cast<int>(truth.count(by_pred[j]));
        best_pred = std::max(best_pred, l[by_pred[j]]);
      }
      wq.recall[r] = static_cast<double>(hit) / static_cast<double>(k);
    }
    wq.best_of_top10 = l[by_true[0]] > 0 ? best_pred / l[by_true[0]] : 0.0;
    acc_sum += wq.pairwise;
    q.workloads.push_back(wq);
  }
  if (!q.workloads.empty()) q.mean_pairwise = acc_sum / static_cast<double>(q.workloads.size());
  q.ok = true;
  return q;
}

}  // namespace lathe::bench
