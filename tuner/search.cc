#include "tuner/search.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <unordered_map>
#include <utility>

#include "codegen/lower.h"
#include "cost_model/features.h"
#include "ir/trace.h"

namespace lathe::tuner {

namespace {

struct Scored {
  Candidate c;
  std::string key;
  float score = 0;
};

// Lowers and extracts features of every candidate, on all cores. Candidates that fail get
// no features (ok[i] == false).
void Featurize(const std::vector<Candidate>& cands, const SearchSpace& space,
               std::vector<cost_model::FeatureMatrix>* feats, std::vector<char>* ok) {
  feats->assign(cands.size(), {});
  ok->assign(cands.size(), 0);
  unsigned nthreads = std::max(1u, std::thread::hardware_concurrency());
  auto work = [&](size_t begin) {
    for (size_t i = begin; i < cands.size(); i += nthreads) {
      auto sch = space.Apply(cands[i]);
      if (!sch.ok()) continue;
      auto f = codegen::Lower(*sch, "candidate");
      if (!f.ok()) continue;
      auto m = cost_model::ExtractFeatures(*f);
      if (!m.ok()) continue;
      (*feats)[i] = std::move(*m);
      (*ok)[i] = 1;
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < nthreads; ++t) threads.emplace_back(work, t);
  work(0);
  for (auto& t : threads) t.join();
}

}  // namespace

std::string CandidateKey(const Candidate& c) {
  ir::Trace t = c.trace;
  t.sketch = -1;  // the instructions decide what is measured
  t.decisions.clear();
  return ir::TraceToJson(t);
}

absl::StatusOr<std::vector<Candidate>> NextBatch(const SearchSpace& space,
                                                 const cost_model::CostModel& model,
                                                 const std::vector<Candidate>& seeds,
                                                 const std::set<std::string>& measured, int batch,
                                                 const SearchOptions& options, std::mt19937_64& rng,
                                                 SearchStats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  SearchStats local;
  SearchStats& st = stats ? *stats : local;
  st = {};
  std::vector<Candidate> out;
  std::set<std::string> taken;
  auto take = [&](const Candidate& c) {
    std::string k = CandidateKey(c);
    if (measured.count(k) || !taken.insert(k).second) return false;
    out.push_back(c);
    return true;
  };
  auto random_fill = [&](int want) {
    // Random samples; the space may be small, so give up after many repeats.
    for (int misses = 0; static_cast<int>(out.size()) < want && misses < 64 * want + 256;) {
      auto c = space.Sample(rng);
      if (!c.ok()) {
        ++st.invalid;
        ++misses;
        continue;
      }
      if (!take(*c)) ++misses;
    }
  };
  if (!model.trained()) {
    random_fill(batch);
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }

  // Initial population: the seeds and random samples.
  std::vector<Candidate> pop(seeds.begin(), seeds.end());
  while (static_cast<int>(pop.size()) < options.population) {
    auto c = space.Sample(rng);
    if (!c.ok()) {
      ++st.invalid;
      if (st.invalid > options.population) break;
      continue;
    }
    pop.push_back(std::move(*c));
  }
  std::unordered_map<std::string, Scored> best;  // every unmeasured candidate seen, by key
  std::uniform_real_distribution<double> unit(0, 1);
  for (int gen = 0; gen <= options.generations && !pop.empty(); ++gen) {
    std::vector<cost_model::FeatureMatrix> feats;
    std::vector<char> ok;
    Featurize(pop, space, &feats, &ok);
    auto scores = model.Predict(feats);
    if (!scores.ok()) return scores.status();
    st.scored += static_cast<int>(pop.size());
    std::vector<double> fitness(pop.size());
    for (size_t i = 0; i < pop.size(); ++i) {
      float s = ok[i] ? (*scores)[i] : -1e9f;
      if (!ok[i]) ++st.invalid;
      fitness[i] = ok[i] ? std::max(1e-6, static_cast<double>(s)) : 0;
      if (!ok[i]) continue;
      std::string k = CandidateKey(pop[i]);
      if (measured.count(k)) continue;
      auto it = best.find(k);
      if (it == best.end()) best.emplace(k, Scored{pop[i], k, s});
    }
    if (gen == options.generations) break;
    // Next generation: parents drawn in proportion to their scores, mutated with
    // probability mutation_prob.
    std::discrete_distribution<size_t> pick(fitness.begin(), fitness.end());
    bool any = std::any_of(fitness.begin(), fitness.end(), [](double f) { return f > 0; });
    if (!any) break;
    std::vector<Candidate> next;
    next.reserve(pop.size());
    for (size_t i = 0; i < pop.size(); ++i) {
      const Candidate& parent = pop[pick(rng)];
      if (unit(rng) < options.mutation_prob) {
        auto m = space.Mutate(parent, rng);
        if (m.ok()) {
          next.push_back(std::move(*m));
          continue;
        }
        ++st.invalid;
      }
      next.push_back(parent);
    }
    pop = std::move(next);
  }
  std::vector<Scored> ranked;
  ranked.reserve(best.size());
  for (auto& [k, s] : best) ranked.push_back(std::move(s));
  std::sort(ranked.begin(), ranked.end(), [](const Scored& a, const Scored& b) {
    return a.score != b.score ? a.score > b.score : a.key < b.key;
  });
  int greedy = batch - static_cast<int>(batch * options.eps_greedy + 0.5);
  for (const Scored& s : ranked) {
    if (static_cast<int>(out.size()) >= greedy) break;
    take(s.c);
  }
  random_fill(batch);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace lathe::tuner
