#include "cost_model/xgb_model.h"

#include <xgboost/c_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace lathe::cost_model {
namespace {

// The one place XGBoost error codes become statuses.
absl::Status XgbStatus(int rc, const char* what) {
  if (rc == 0) return absl::OkStatus();
  const char* msg = XGBGetLastError();
  return absl::InternalError(absl::StrCat("xgboost ", what, ": ", msg ? msg : "unknown error"));
}

#define LATHE_XGB(call, what)                                              \
  do {                                                                     \
    if (absl::Status _st = XgbStatus((call), what); !_st.ok()) return _st; \
  } while (0)

struct BoosterDeleter {
  void operator()(void* h) const { XGBoosterFree(h); }
};
struct DMatrixDeleter {
  void operator()(void* h) const { XGDMatrixFree(h); }
};
// RAII owners of XGBoost's opaque handles.
using Booster = std::unique_ptr<void, BoosterDeleter>;
using DMatrix = std::unique_ptr<void, DMatrixDeleter>;

absl::StatusOr<Booster> NewBooster(const std::vector<DMatrixHandle>& cache) {
  BoosterHandle h = nullptr;
  LATHE_XGB(XGBoosterCreate(cache.empty() ? nullptr : cache.data(), cache.size(), &h),
            "create booster");
  return Booster(h);
}

absl::StatusOr<DMatrix> NewDMatrix(const std::vector<float>& rows, size_t num_rows,
                                   const std::vector<float>* labels,
                                   const std::vector<float>* weights) {
  DMatrixHandle h = nullptr;
  LATHE_XGB(XGDMatrixCreateFromMat(rows.data(), num_rows, kNumFeatures,
                                   std::numeric_limits<float>::quiet_NaN(), &h),
            "create matrix");
  DMatrix m(h);
  if (labels != nullptr) {
    LATHE_XGB(XGDMatrixSetFloatInfo(h, "label", labels->data(), labels->size()), "set labels");
  }
  if (weights != nullptr) {
    LATHE_XGB(XGDMatrixSetFloatInfo(h, "weight", weights->data(), weights->size()), "set weights");
  }
  return m;
}

absl::Status CheckWidth(const FeatureMatrix& m, size_t i) {
  if (m.num_cols != kNumFeatures ||
      m.data.size() != static_cast<size_t>(m.num_rows) * static_cast<size_t>(kNumFeatures)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "feature matrix ", i, " has ", m.num_rows, " rows of ", m.num_cols, " columns and ",
        m.data.size(), " values; expected ", kNumFeatures, " columns"));
  }
  return absl::OkStatus();
}

// The last "name-metric:value" figure of an XGBoost evaluation line.
double ParseEval(const char* text) {
  std::string s(text ? text : "");
  size_t colon = s.rfind(':');
  double v = std::numeric_limits<double>::infinity();
  if (colon != std::string::npos && !absl::SimpleAtod(s.substr(colon + 1), &v)) {
    v = std::numeric_limits<double>::infinity();
  }
  return v;
}

constexpr char kMagic[] = "lathe-xgb";

// FNV-1a 64 of the model body: XGBoost's UBJSON reader may read past the end of a truncated
// buffer, so damaged bytes must be caught before they reach it.
uint64_t Checksum(const char* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

// Programs as consecutive rows of one matrix, for the objectives trained on program sums.
struct Packed {
  std::vector<float> rows;
  std::vector<size_t> begin;  // program i owns rows [begin[i], begin[i + 1])
  std::vector<float> labels;  // per program
  std::vector<int> group;     // workload of each program, 0..num_groups-1
  int num_groups = 0;
};

// Squared error of program sums against labels, good programs weighted up (as Ansor does):
// per program gradient and hessian.
void PackSumGradients(const Packed& p, const std::vector<double>& sums, std::vector<double>* g,
                      std::vector<double>* h) {
  g->assign(p.labels.size(), 0.0);
  h->assign(p.labels.size(), 0.0);
  for (size_t i = 0; i < p.labels.size(); ++i) {
    const double w = std::max(p.labels[i], 0.1f);
    (*g)[i] = w * (sums[i] - p.labels[i]);
    (*h)[i] = w;
  }
}

// Pairwise logistic loss between programs of one workload, each pair weighted by the
// difference of the two labels. Groups with few enough pairs use all of them; larger ones
// draw a fixed number of partners per program each round. Hessians are scaled so their mean
// per program is 1, which keeps min_child_weight and the L2 term meaningful.
void PairwiseGradients(const Packed& p, const std::vector<double>& sums, std::mt19937_64& rng,
                       std::vector<double>* g, std::vector<double>* h) {
  constexpr size_t kMaxPairsPerGroup = 40000;
  const size_t n = p.labels.size();
  g->assign(n, 0.0);
  h->assign(n, 0.0);
  std::vector<std::vector<size_t>> members(static_cast<size_t>(p.num_groups));
  for (size_t i = 0; i < n; ++i) members[static_cast<size_t>(p.group[i])].push_back(i);
  auto pair = [&](size_t a, size_t b) {
    if (p.labels[a] == p.labels[b]) return;
    if (p.labels[a] < p.labels[b]) std::swap(a, b);  // a is the better program
    const double w = p.labels[a] - p.labels[b];
    const double q = 1.0 / (1.0 + std::exp(sums[a] - sums[b]));  // P(order is wrong)
    (*g)[a] -= w * q;
    (*g)[b] += w * q;
    const double hh = w * std::max(q * (1.0 - q), 1e-6);
    (*h)[a] += hh;
    (*h)[b] += hh;
  };
  for (const std::vector<size_t>& m : members) {
    const size_t k = m.size();
    if (k < 2) continue;
    if (k * (k - 1) / 2 <= kMaxPairsPerGroup) {
      for (size_t x = 0; x < k; ++x) {
        for (size_t y = x + 1; y < k; ++y) pair(m[x], m[y]);
      }
      continue;
    }
    const size_t partners = std::max<size_t>(kMaxPairsPerGroup / k, 1);
    std::uniform_int_distribution<size_t> pick(0, k - 1);
    for (size_t x = 0; x < k; ++x) {
      for (size_t t = 0; t < partners; ++t) {
        const size_t y = pick(rng);
        if (y != x) pair(m[x], m[y]);
      }
    }
  }
  double hsum = 0;
  for (double v : *h) hsum += v;
  if (hsum <= 0) return;
  const double scale = static_cast<double>(n) / hsum;
  for (size_t i = 0; i < n; ++i) {
    (*g)[i] *= scale;
    (*h)[i] = std::max((*h)[i] * scale, 1e-3);
  }
}

// Pairwise accuracy of program sums within each workload, pooled over the pairs.
double GroupedPairwiseAccuracy(const Packed& p, const std::vector<double>& sums) {
  int64_t pairs = 0, right = 0;
  for (size_t i = 0; i < p.labels.size(); ++i) {
    for (size_t j = i + 1; j < p.labels.size(); ++j) {
      if (p.group[i] != p.group[j] || p.labels[i] == p.labels[j]) continue;
      ++pairs;
      if ((sums[i] - sums[j]) * (p.labels[i] - p.labels[j]) > 0) ++right;
    }
  }
  return pairs == 0 ? 1.0 : static_cast<double>(right) / static_cast<double>(pairs);
}

}  // namespace

const char* ObjectiveName(Objective o) {
  switch (o) {
    case Objective::kRowRegression:
      return "row-regression";
    case Objective::kPackSumRegression:
      return "pack-sum";
    case Objective::kPairwiseRank:
      return "pairwise-rank";
  }
  return "unknown";
}

struct CostModel::Impl {
  CostModelOptions options;
  Booster booster;
  std::vector<FeatureMatrix> programs;
  std::vector<double> throughputs;
  std::vector<std::string> keys;
  int64_t trained_on = 0;
  // A program's score: the sum of its rows' predictions (else their mean).
  bool sum_rows = false;

  absl::Status SetParams(BoosterHandle h) const {
    const bool custom = options.objective != Objective::kRowRegression;
    const std::vector<std::pair<std::string, std::string>> params = {
        // The custom objectives hand XGBoost their own gradients; the objective named here
        // then only fixes the output transform (identity) and base_score 0 keeps row sums
        // free of a per-row offset.
        {"objective", "reg:squarederror"},
        {"base_score", custom ? "0" : "0.5"},
        {"tree_method", "hist"},
        {"eta", absl::StrCat(options.eta)},
        {"max_depth", absl::StrCat(options.max_depth)},
        {"min_child_weight", absl::StrCat(options.min_child_weight)},
        {"subsample", absl::StrCat(options.subsample)},
        {"seed", absl::StrCat(options.seed)},
        {"eval_metric", "rmse"},
        {"verbosity", "0"},
    };
    for (const auto& [k, v] : params) {
      LATHE_XGB(XGBoosterSetParam(h, k.c_str(), v.c_str()), "set parameter");
    }
    if (options.nthread > 0) {
      LATHE_XGB(XGBoosterSetParam(h, "nthread", absl::StrCat(options.nthread).c_str()),
                "set parameter");
    }
    return absl::OkStatus();
  }

  // Rows, labels and weights of the programs at `idx`.
  void Gather(const std::vector<size_t>& idx, const std::vector<float>& labels,
              std::vector<float>* rows, std::vector<float>* row_labels,
              std::vector<float>* row_weights) const {
    for (size_t i : idx) {
      const FeatureMatrix& m = programs[i];
      rows->insert(rows->end(), m.data.begin(), m.data.end());
      // Good programs weigh more: ranking the top right matters most (Ansor does the same).
      float w = std::max(labels[i], 0.1f) / static_cast<float>(std::max(m.num_rows, 1));
      for (int r = 0; r < m.num_rows; ++r) {
        row_labels->push_back(labels[i]);
        row_weights->push_back(w);
      }
    }
  }

  absl::Status Train() {
    const std::vector<float> labels = NormalizeByWorkload(throughputs, keys);
    std::vector<size_t> idx;
    for (size_t i = 0; i < programs.size(); ++i) {
      if (programs[i].num_rows > 0) idx.push_back(i);
    }
    if (static_cast<int>(idx.size()) < options.min_programs) {
      return absl::FailedPreconditionError(
          absl::StrCat("cost model needs at least ", options.min_programs,
                       " programs with features to train; it has ", idx.size()));
    }
    std::mt19937_64 rng(options.seed);
    std::shuffle(idx.begin(), idx.end(), rng);
    size_t num_valid = 0;
    if (options.early_stopping_rounds > 0 &&
        static_cast<int>(idx.size()) >= options.early_stopping_min_programs) {
      num_valid =
          static_cast<size_t>(static_cast<double>(idx.size()) * options.validation_fraction);
    }
    std::vector<size_t> valid_idx(idx.begin(), idx.begin() + num_valid);
    std::vector<size_t> train_idx(idx.begin() + num_valid, idx.end());

    if (options.objective != Objective::kRowRegression) {
      return TrainOnSums(train_idx, valid_idx, labels);
    }
    std::vector<float> rows, row_labels, row_weights;
    Gather(train_idx, labels, &rows, &row_labels, &row_weights);
    absl::StatusOr<DMatrix> dtrain = NewDMatrix(rows, row_labels.size(), &row_labels, &row_weights);
    if (!dtrain.ok()) return dtrain.status();
    std::vector<DMatrixHandle> cache = {dtrain->get()};
    DMatrix dvalid;
    if (num_valid > 0) {
      std::vector<float> vrows, vlabels, vweights;
      Gather(valid_idx, labels, &vrows, &vlabels, &vweights);
      absl::StatusOr<DMatrix> m = NewDMatrix(vrows, vlabels.size(), &vlabels, &vweights);
      if (!m.ok()) return m.status();
      dvalid = std::move(*m);
      cache.push_back(dvalid.get());
    }
    absl::StatusOr<Booster> b = NewBooster(cache);
    if (!b.ok()) return b.status();
    if (absl::Status st = SetParams(b->get()); !st.ok()) return st;

    double best = std::numeric_limits<double>::infinity();
    int best_iter = -1;
    for (int iter = 0; iter < options.max_rounds; ++iter) {
      LATHE_XGB(XGBoosterUpdateOneIter(b->get(), iter, dtrain->get()), "train");
      if (dvalid == nullptr) {
        best_iter = iter;
        continue;
      }
      DMatrixHandle evals[] = {dvalid.get()};
      const char* names[] = {"valid"};
      const char* out = nullptr;
      LATHE_XGB(XGBoosterEvalOneIter(b->get(), iter, evals, names, 1, &out), "evaluate");
      double rmse = ParseEval(out);
      if (rmse < best) {
        best = rmse;
        best_iter = iter;
      } else if (iter - best_iter >= options.early_stopping_rounds) {
        break;
      }
    }
    return Keep(std::move(*b), best_iter, /*sums=*/false);
  }

  // Keeps the first best_iter + 1 rounds of `model` (the best on the validation set) as the
  // model, scoring programs by the sum (else the mean) of their rows.
  absl::Status Keep(Booster model, int best_iter, bool sums) {
    int rounds = 0;
    LATHE_XGB(XGBoosterBoostedRounds(model.get(), &rounds), "count rounds");
    if (best_iter + 1 < rounds) {
      BoosterHandle sliced = nullptr;
      LATHE_XGB(XGBoosterSlice(model.get(), 0, best_iter + 1, 1, &sliced), "slice");
      model.reset(sliced);
    }
    booster = std::move(model);
    sum_rows = sums;
    trained_on = static_cast<int64_t>(programs.size());
    return absl::OkStatus();
  }

  // Programs at `idx` laid out for training on program sums.
  Packed Pack(const std::vector<size_t>& idx, const std::vector<float>& labels) const {
    Packed p;
    std::map<std::string, int> group_of;
    p.begin.push_back(0);
    for (size_t i : idx) {
      const FeatureMatrix& m = programs[i];
      p.rows.insert(p.rows.end(), m.data.begin(), m.data.end());
      p.begin.push_back(p.begin.back() + static_cast<size_t>(m.num_rows));
      p.labels.push_back(labels[i]);
      p.group.push_back(group_of.emplace(keys[i], static_cast<int>(group_of.size())).first->second);
    }
    p.num_groups = static_cast<int>(group_of.size());
    return p;
  }

  // Row margins of `m` (the booster's current trees) summed per program of `p`.
  absl::Status ProgramSums(BoosterHandle b, DMatrixHandle m, const Packed& p,
                           std::vector<double>* sums) const {
    bst_ulong len = 0;
    const float* out = nullptr;
    LATHE_XGB(XGBoosterPredict(b, m, /*option_mask=*/1, 0, /*training=*/1, &len, &out), "predict");
    if (len != p.begin.back()) {
      return absl::InternalError(
          absl::StrCat("xgboost predicted ", len, " rows, expected ", p.begin.back()));
    }
    sums->assign(p.labels.size(), 0.0);
    for (size_t i = 0; i < p.labels.size(); ++i) {
      for (size_t r = p.begin[i]; r < p.begin[i + 1]; ++r) (*sums)[i] += out[r];
    }
    return absl::OkStatus();
  }

  absl::Status TrainOnSums(const std::vector<size_t>& train_idx,
                           const std::vector<size_t>& valid_idx, const std::vector<float>& labels) {
    const Packed train = Pack(train_idx, labels);
    absl::StatusOr<DMatrix> dtrain = NewDMatrix(train.rows, train.begin.back(), nullptr, nullptr);
    if (!dtrain.ok()) return dtrain.status();
    std::vector<DMatrixHandle> cache = {dtrain->get()};
    const Packed valid = Pack(valid_idx, labels);
    DMatrix dvalid;
    if (!valid_idx.empty()) {
      absl::StatusOr<DMatrix> m = NewDMatrix(valid.rows, valid.begin.back(), nullptr, nullptr);
      if (!m.ok()) return m.status();
      dvalid = std::move(*m);
      cache.push_back(dvalid.get());
    }
    absl::StatusOr<Booster> b = NewBooster(cache);
    if (!b.ok()) return b.status();
    if (absl::Status st = SetParams(b->get()); !st.ok()) return st;

    std::mt19937_64 rng(options.seed);
    std::vector<double> sums, g, h;
    std::vector<float> row_g(train.begin.back()), row_h(train.begin.back());
    double best = -1;
    int best_iter = -1;
    for (int iter = 0; iter < options.max_rounds; ++iter) {
      if (iter == 0) {
        sums.assign(train.labels.size(), 0.0);
      } else if (absl::Status st = ProgramSums(b->get(), dtrain->get(), train, &sums); !st.ok()) {
        return st;
      }
      if (options.objective == Objective::kPackSumRegression) {
        PackSumGradients(train, sums, &g, &h);
      } else {
        PairwiseGradients(train, sums, rng, &g, &h);
      }
      for (size_t i = 0; i < train.labels.size(); ++i) {
        for (size_t r = train.begin[i]; r < train.begin[i + 1]; ++r) {
          row_g[r] = static_cast<float>(g[i]);
          row_h[r] = static_cast<float>(h[i]);
        }
      }
      LATHE_XGB(XGBoosterBoostOneIter(b->get(), dtrain->get(), row_g.data(), row_h.data(),
                                      static_cast<bst_ulong>(row_g.size())),
                "train");
      if (dvalid == nullptr) {
        best_iter = iter;
        continue;
      }
      std::vector<double> vsums;
      if (absl::Status st = ProgramSums(b->get(), dvalid.get(), valid, &vsums); !st.ok()) {
        return st;
      }
      const double acc = GroupedPairwiseAccuracy(valid, vsums);
      if (acc > best) {
        best = acc;
        best_iter = iter;
      } else if (iter - best_iter >= options.early_stopping_rounds) {
        break;
      }
    }
    return Keep(std::move(*b), best_iter, /*sums=*/true);
  }
};

CostModel::CostModel(CostModelOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
}
CostModel::~CostModel() = default;
CostModel::CostModel(CostModel&&) noexcept = default;
CostModel& CostModel::operator=(CostModel&&) noexcept = default;

bool CostModel::trained() const { return impl_->booster != nullptr; }
int64_t CostModel::num_programs() const { return static_cast<int64_t>(impl_->programs.size()); }
int64_t CostModel::trained_on() const { return impl_->trained_on; }

absl::Status CostModel::Update(const std::vector<FeatureMatrix>& programs,
                               const std::vector<double>& throughputs,
                               const std::vector<std::string>& workload_keys) {
  if (programs.size() != throughputs.size() || programs.size() != workload_keys.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost model update: ", programs.size(), " programs, ", throughputs.size(),
                     " throughputs and ", workload_keys.size(), " workload keys"));
  }
  for (size_t i = 0; i < programs.size(); ++i) {
    if (absl::Status st = CheckWidth(programs[i], i); !st.ok()) return st;
    if (!std::isfinite(throughputs[i]) || throughputs[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost model update: throughput ", throughputs[i], " of program ", i));
    }
  }
  Impl& m = *impl_;
  m.programs.insert(m.programs.end(), programs.begin(), programs.end());
  m.throughputs.insert(m.throughputs.end(), throughputs.begin(), throughputs.end());
  m.keys.insert(m.keys.end(), workload_keys.begin(), workload_keys.end());
  const double have = static_cast<double>(m.programs.size());
  const double last = static_cast<double>(m.booster != nullptr && m.trained_on > 0 &&
                                                  m.trained_on <= static_cast<int64_t>(have)
                                              ? m.trained_on
                                              : 0);
  if (have < m.options.min_programs) return absl::OkStatus();
  if (last > 0 && have < last * (1.0 + m.options.retrain_growth)) return absl::OkStatus();
  return m.Train();
}

absl::Status CostModel::Train() { return impl_->Train(); }

absl::StatusOr<std::vector<float>> CostModel::Predict(
    const std::vector<FeatureMatrix>& programs) const {
  std::vector<const FeatureMatrix*> ptrs;
  ptrs.reserve(programs.size());
  for (const FeatureMatrix& m : programs) ptrs.push_back(&m);
  return Predict(ptrs);
}

absl::StatusOr<std::vector<float>> CostModel::Predict(
    const std::vector<const FeatureMatrix*>& programs) const {
  if (impl_->booster == nullptr) {
    return absl::FailedPreconditionError("cost model is not trained");
  }
  std::vector<float> rows;
  size_t num_rows = 0;
  for (size_t i = 0; i < programs.size(); ++i) {
    if (absl::Status st = CheckWidth(*programs[i], i); !st.ok()) return st;
    num_rows += static_cast<size_t>(programs[i]->num_rows);
  }
  std::vector<float> scores(programs.size(), 0.f);
  if (num_rows == 0) return scores;
  rows.reserve(num_rows * kNumFeatures);
  for (const FeatureMatrix* m : programs) rows.insert(rows.end(), m->data.begin(), m->data.end());

  const std::string array = absl::StrCat(R"({"data": [)", reinterpret_cast<uintptr_t>(rows.data()),
                                         R"(, true], "shape": [)", num_rows, ", ", kNumFeatures,
                                         R"(], "typestr": "<f4", "version": 3})");
  const char* config =
      R"({"cache_id": 0, "type": 0, "training": false, "iteration_begin": 0, "iteration_end": 0, )"
      R"("strict_shape": false, "missing": -1e38})";
  const bst_ulong* shape = nullptr;
  bst_ulong dim = 0;
  const float* out = nullptr;
  LATHE_XGB(XGBoosterPredictFromDense(impl_->booster.get(), array.c_str(), config, nullptr, &shape,
                                      &dim, &out),
            "predict");
  size_t r = 0;
  for (size_t i = 0; i < programs.size(); ++i) {
    const int n = programs[i]->num_rows;
    if (n == 0) continue;
    double sum = 0;
    for (int k = 0; k < n; ++k) sum += out[r + k];
    r += static_cast<size_t>(n);
    scores[i] = static_cast<float>(impl_->sum_rows ? sum : sum / n);
  }
  return scores;
}

absl::StatusOr<std::string> CostModel::Save() const {
  if (impl_->booster == nullptr) {
    return absl::FailedPreconditionError("cost model is not trained; nothing to save");
  }
  bst_ulong len = 0;
  const char* buf = nullptr;
  LATHE_XGB(XGBoosterSaveModelToBuffer(impl_->booster.get(), R"({"format": "ubj"})", &len, &buf),
            "save model");
  std::string out = absl::StrCat(kMagic, " ", kFeatureVersion, " ", kNumFeatures, " ",
                                 impl_->trained_on, " ", len, " ", absl::Hex(Checksum(buf, len)),
                                 " ", impl_->sum_rows ? "sum" : "mean", "\n");
  out.append(buf, len);
  return out;
}

absl::StatusOr<CostModel> CostModel::Load(const std::string& bytes, CostModelOptions options) {
  const size_t eol = bytes.find('\n');
  const std::vector<std::string> header =
      eol == std::string::npos ? std::vector<std::string>{}
                               : absl::StrSplit(bytes.substr(0, std::min<size_t>(eol, 200)), ' ');
  int version = 0, width = 0;
  int64_t trained_on = 0;
  uint64_t body_size = 0, checksum = 0;
  // Models saved before the aggregation field existed (six fields) score by the mean.
  const bool sum_rows = header.size() == 7 && header[6] == "sum";
  if ((header.size() != 6 && !(header.size() == 7 && (sum_rows || header[6] == "mean"))) ||
      header[0] != kMagic || !absl::SimpleAtoi(header[1], &version) ||
      !absl::SimpleAtoi(header[2], &width) || !absl::SimpleAtoi(header[3], &trained_on) ||
      !absl::SimpleAtoi(header[4], &body_size) || !absl::SimpleHexAtoi(header[5], &checksum)) {
    return absl::InvalidArgumentError("cost model bytes: not a lathe xgboost model (bad header)");
  }
  if (version != kFeatureVersion || width != kNumFeatures) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cost model bytes: feature layout version ", version, " with ", width,
        " features; this build uses version ", kFeatureVersion, " with ", kNumFeatures));
  }
  const size_t body = eol + 1;
  if (bytes.size() - body != body_size) {
    return absl::InvalidArgumentError(absl::StrCat("cost model bytes: the model holds ",
                                                   bytes.size() - body, " bytes; its header says ",
                                                   body_size, " (truncated?)"));
  }
  if (Checksum(bytes.data() + body, bytes.size() - body) != checksum) {
    return absl::InvalidArgumentError("cost model bytes: checksum mismatch (corrupt model)");
  }
  absl::StatusOr<Booster> b = NewBooster({});
  if (!b.ok()) return b.status();
  if (absl::Status st =
          XgbStatus(XGBoosterLoadModelFromBuffer(b->get(), bytes.data() + body,
                                                 static_cast<bst_ulong>(bytes.size() - body)),
                    "load model");
      !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cost model bytes: ", st.message()));
  }
  bst_ulong features = 0;
  if (absl::Status st = XgbStatus(XGBoosterGetNumFeature(b->get(), &features), "read model");
      !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cost model bytes: ", st.message()));
  }
  if (features != static_cast<bst_ulong>(kNumFeatures)) {
    return absl::InvalidArgumentError(absl::StrCat("cost model bytes: the model has ", features,
                                                   " features, expected ", kNumFeatures));
  }
  CostModel model(options);
  model.impl_->booster = std::move(*b);
  model.impl_->trained_on = trained_on;
  model.impl_->sum_rows = sum_rows;
  return model;
}

std::vector<float> NormalizeByWorkload(const std::vector<double>& throughputs,
                                       const std::vector<std::string>& workload_keys) {
  std::map<std::string, double> best;
  for (size_t i = 0; i < throughputs.size(); ++i) {
    double& b = best[workload_keys[i]];
    b = std::max(b, throughputs[i]);
  }
  std::vector<float> labels(throughputs.size(), 0.f);
  for (size_t i = 0; i < throughputs.size(); ++i) {
    const double b = best[workload_keys[i]];
    labels[i] = b > 0 ? static_cast<float>(throughputs[i] / b) : 0.f;
  }
  return labels;
}

double PairwiseAccuracy(const std::vector<float>& scores, const std::vector<float>& labels) {
  int64_t pairs = 0, right = 0;
  const size_t n = std::min(scores.size(), labels.size());
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (labels[i] == labels[j]) continue;
      ++pairs;
      if ((scores[i] - scores[j]) * (labels[i] - labels[j]) > 0) ++right;
    }
  }
  return pairs == 0 ? 1.0 : static_cast<double>(right) / static_cast<double>(pairs);
}

}  // namespace lathe::cost_model
