#include "tuner/search.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "codegen/lower.h"
#include "cost_model/features.h"
#include "ir/trace.h"

namespace lathe::tuner {

namespace {

// A candidate of the round, by where it lives: generation `gen` of the population, index
// `idx` (every generation is kept until the round ends, so nothing is copied to remember it).
struct Scored {
  size_t gen = 0, idx = 0;
  float score = 0;
  size_t program = 0;  // ProgramScores' index of its program
};

// A fixed set of worker threads for the parallel loops of one round: started once per
// round, not once per loop. For(n, fn) runs fn(i) for every i in [0, n) on the workers and
// the calling thread, handing out indices one at a time (lowering a candidate costs a
// fraction of a millisecond; a core taken by another process then slows only its own share).
// fn(i) must only touch state of index i. Not reentrant; one caller at a time.
class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    const unsigned n = threads > 0 ? static_cast<unsigned>(threads)
                                   : std::max(1u, std::thread::hardware_concurrency());
    for (unsigned t = 1; t < n; ++t) workers_.emplace_back([this] { Loop(); });
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void For(size_t n, const std::function<void(size_t)>& fn) {
    if (workers_.empty() || n < 2) {
      for (size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0);
      busy_ = workers_.size();
      ++job_;
    }
    wake_.notify_all();
    Work();
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return busy_ == 0; });
    fn_ = nullptr;
  }

 private:
  void Work() {
    for (size_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) (*fn_)(i);
  }
  void Loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || job_ != seen; });
        if (stop_) return;
        seen = job_;
      }
      Work();
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  size_t busy_ = 0;
  uint64_t job_ = 0;
  bool stop_ = false;
};

// The model's score of each candidate's lowered program, memoised by the program
// (ProgramOf): evolved populations repeat themselves, and the model does not change during
// a round, so each distinct program is lowered, featurized and scored once. Scores are per
// program (the model scores each row on its own), so scoring only the new programs gives the
// same values as scoring whole populations.
class ProgramScores {
 public:
  ProgramScores(const SearchSpace& space, const cost_model::CostModel& model, WorkerPool& pool)
      : space_(space), model_(model), pool_(pool) {}

  // Fills scores/ok for `cands` (ok[i] == 0 when the candidate does not lower) and the index
  // of each one's program (equal for candidates of one program; below size()). Once a
  // candidate's program is scored its schedule is no longer needed: with `drop_schedules`
  // they are released here, so that a round holds one generation's schedules at a time
  // instead of every generation's (hundreds of megabytes of fresh pages otherwise).
  absl::Status Score(std::vector<Candidate>& cands, bool drop_schedules, std::vector<float>* scores,
                     std::vector<char>* ok, std::vector<size_t>* programs) {
    scores->assign(cands.size(), 0.f);
    ok->assign(cands.size(), 0);
    // What decides a candidate's lowered program is its trace's instructions (replaying them
    // is deterministic); distinct decisions often give one program.
    std::vector<ir::ProgramId> keys(cands.size());
    pool_.For(cands.size(), [&](size_t i) { keys[i] = ProgramOf(cands[i]); });
    std::vector<size_t>& program = *programs;
    program.assign(cands.size(), 0);
    std::vector<size_t> todo;  // candidates whose program is new: lowered here
    for (size_t i = 0; i < cands.size(); ++i) {
      auto [it, fresh] = index_.try_emplace(keys[i], programs_.size());
      program[i] = it->second;
      if (fresh) {
        programs_.push_back({});
        todo.push_back(i);
      }
    }
    std::vector<std::shared_ptr<cost_model::FeatureMatrix>> feats(todo.size());
    std::vector<char> lowered(todo.size(), 0);
    const codegen::LowerOptions lower_options =
        codegen::LowerOptions::ForTarget(space_.target_kind());
    pool_.For(todo.size(), [&](size_t t) {
      const Candidate& c = cands[todo[t]];
      absl::StatusOr<ir::Schedule> applied = absl::UnknownError("");
      const ir::Schedule* sch = c.schedule.get();
      if (!sch) {
        applied = space_.Apply(c);
        if (!applied.ok()) return;
        sch = &*applied;
      }
      auto f = codegen::Lower(*sch, "candidate", lower_options);
      if (!f.ok()) return;
      auto m = cost_model::ExtractFeatures(*f);
      if (!m.ok()) return;
      feats[t] = std::make_shared<cost_model::FeatureMatrix>(std::move(*m));
      lowered[t] = 1;
    });
    if (drop_schedules) {
      pool_.For(cands.size(), [&](size_t i) { cands[i].schedule.reset(); });
    }
    // Predict() is thread-safe: score halves of the new programs on separate cores.
    std::vector<const cost_model::FeatureMatrix*> head, tail;
    std::vector<size_t> head_of, tail_of;  // positions in `todo`
    const size_t half = todo.size() / 2;
    for (size_t t = 0; t < todo.size(); ++t) {
      if (!lowered[t]) continue;
      (t < half ? head : tail).push_back(feats[t].get());
      (t < half ? head_of : tail_of).push_back(t);
    }
    absl::StatusOr<std::vector<float>> head_scores, tail_scores;
    pool_.For(2, [&](size_t i) {
      if (i == 0) {
        head_scores = model_.Predict(head);
      } else {
        tail_scores = model_.Predict(tail);
      }
    });
    if (!head_scores.ok()) return head_scores.status();
    if (!tail_scores.ok()) return tail_scores.status();
    for (size_t k = 0; k < head_of.size(); ++k) {
      programs_[program[todo[head_of[k]]]] = {(*head_scores)[k], true,
                                              std::move(feats[head_of[k]])};
    }
    for (size_t k = 0; k < tail_of.size(); ++k) {
      programs_[program[todo[tail_of[k]]]] = {(*tail_scores)[k], true,
                                              std::move(feats[tail_of[k]])};
    }
    for (size_t i = 0; i < cands.size(); ++i) {
      const Program& p = programs_[program[i]];
      (*ok)[i] = p.ok;
      (*scores)[i] = p.score;
    }
    return absl::OkStatus();
  }
  size_t size() const { return programs_.size(); }
  // The features of program `i` (null when it did not lower).
  const std::shared_ptr<const cost_model::FeatureMatrix>& features(size_t i) const {
    return programs_[i].features;
  }

 private:
  struct Program {
    float score = 0;
    bool ok = false;  // lowered and featurized
    std::shared_ptr<const cost_model::FeatureMatrix> features;
  };
  const SearchSpace& space_;
  const cost_model::CostModel& model_;
  WorkerPool& pool_;
  absl::flat_hash_map<ir::ProgramId, size_t> index_;  // program -> programs_ index
  std::vector<Program> programs_;
};

}  // namespace

absl::StatusOr<std::vector<Candidate>> NextBatch(const SearchSpace& space,
                                                 const cost_model::CostModel& model,
                                                 const std::vector<Candidate>& seeds,
                                                 const ProgramSet& measured, int batch,
                                                 const SearchOptions& options, std::mt19937_64& rng,
                                                 SearchStats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  SearchStats local;
  SearchStats& st = stats ? *stats : local;
  st = {};
  std::vector<Candidate> out;
  ProgramSet taken;
  // Programs (ProgramScores indices) already offered to `take`: the best-ranked decisions
  // often share a program, and by the end of a round most of them are measured ones.
  std::vector<char> offered;
  // The features of the program each `take` with a program index names (set once the round
  // scores programs).
  const ProgramScores* scored = nullptr;
  auto take = [&](const Candidate& c, std::optional<size_t> program = std::nullopt) {
    if (program) {
      if (*program >= offered.size()) offered.resize(*program + 1, 0);
      if (offered[*program]) return false;
      offered[*program] = 1;
    }
    const ir::ProgramId k = ProgramOf(c);
    if (measured.contains(k) || !taken.insert(k).second) return false;
    out.push_back(c);
    if (program && scored != nullptr) out.back().features = scored->features(*program);
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
  size_t fresh = options.population > static_cast<int>(pop.size())
                     ? static_cast<size_t>(options.population) - pop.size()
                     : 0;
  std::vector<uint64_t> sample_seed(fresh);
  for (uint64_t& x : sample_seed) x = rng();
  std::vector<std::optional<Candidate>> sampled(fresh);
  WorkerPool pool(options.threads);
  pool.For(fresh, [&](size_t i) {
    std::mt19937_64 local(sample_seed[i]);
    auto c = space.Sample(local);
    if (c.ok()) sampled[i] = std::move(*c);
  });
  for (auto& c : sampled) {
    if (c) {
      pop.push_back(std::move(*c));
    } else {
      ++st.invalid;
    }
  }
  // Every candidate seen, by decisions (where it was first seen). Whether it was measured
  // already is asked only of the best-scored ones at the end (`take`).
  std::map<std::vector<int64_t>, Scored> best;
  std::vector<std::vector<Candidate>> generations;
  // Mutations that land on decisions seen in an earlier generation copy that candidate
  // instead of replaying it (`best` and `generations` do not change while they run).
  struct Seen : KnownCandidates {
    const std::map<std::vector<int64_t>, Scored>* best;
    const std::vector<std::vector<Candidate>>* generations;
    const Candidate* Find(const std::vector<int64_t>& decisions) const override {
      auto it = best->find(decisions);
      return it == best->end() ? nullptr : &(*generations)[it->second.gen][it->second.idx];
    }
  } seen;
  seen.best = &best;
  seen.generations = &generations;
  ProgramScores cache(space, model, pool);
  scored = &cache;
  std::uniform_real_distribution<double> unit(0, 1);
  for (int gen = 0; gen <= options.generations && !pop.empty(); ++gen) {
    std::vector<float> scores;
    std::vector<char> ok;
    std::vector<size_t> programs;
    if (absl::Status s = cache.Score(pop, /*drop_schedules=*/true, &scores, &ok, &programs);
        !s.ok()) {
      return s;
    }
    st.scored += static_cast<int>(pop.size());
    // Fitness by rank, not by score: scores are only ordered (the pairwise model's are
    // logits), so the r-th best of the population weighs exp(-r / (N / 4)); the top quarter
    // draws about two thirds of the parents.
    std::vector<size_t> by_score;
    for (size_t i = 0; i < pop.size(); ++i) {
      if (ok[i]) by_score.push_back(i);
    }
    std::stable_sort(by_score.begin(), by_score.end(),
                     [&](size_t a, size_t b) { return scores[a] > scores[b]; });
    std::vector<double> fitness(pop.size(), 0.0);
    const double temperature = std::max(1.0, static_cast<double>(by_score.size()) / 4);
    for (size_t r = 0; r < by_score.size(); ++r) {
      fitness[by_score[r]] = std::exp(-static_cast<double>(r) / temperature);
    }
    for (size_t i = 0; i < pop.size(); ++i) {
      const float s = ok[i] ? scores[i] : -1e9f;
      if (!ok[i]) ++st.invalid;
      if (!ok[i] || best.count(pop[i].decisions)) continue;
      best.emplace(pop[i].decisions, Scored{generations.size(), i, s, programs[i]});
    }
    generations.push_back(std::move(pop));
    const std::vector<Candidate>& parents = generations.back();
    if (gen == options.generations) break;
    // Next generation: parents drawn in proportion to their scores, mutated with
    // probability mutation_prob.
    std::discrete_distribution<size_t> pick(fitness.begin(), fitness.end());
    bool any = std::any_of(fitness.begin(), fitness.end(), [](double f) { return f > 0; });
    if (!any) break;
    // Parents and seeds are drawn here, in order, so the round is deterministic; the
    // mutations (each replays a schedule) run on every core.
    std::vector<size_t> parent(parents.size());
    std::vector<uint64_t> seed(parents.size());
    std::vector<char> mutate(parents.size());
    for (size_t i = 0; i < parents.size(); ++i) {
      parent[i] = pick(rng);
      mutate[i] = unit(rng) < options.mutation_prob;
      seed[i] = rng();
    }
    std::vector<Candidate> next(parents.size());
    std::vector<char> failed(parents.size(), 0);
    pool.For(parents.size(), [&](size_t i) {
      const Candidate& p = parents[parent[i]];
      if (mutate[i]) {
        std::mt19937_64 local(seed[i]);
        auto m = space.Mutate(p, local, &seen);
        if (m.ok()) {
          next[i] = std::move(*m);
          return;
        }
        failed[i] = 1;
      }
      next[i] = p;
    });
    for (char f : failed) st.invalid += f;
    pop = std::move(next);
  }
  // Local search: single-step neighbours of the best measured candidates, ranked by the
  // model, fill up to `local_share` of the batch first. Trees do not extrapolate: a tile
  // size next to the best measured one scores like the tiles the model has seen, so the
  // evolved population alone is slow to try it; measuring the best-ranked neighbours
  // climbs from the incumbent every round.
  const int local_quota = std::min(batch, static_cast<int>(batch * options.local_share + 0.5));
  if (local_quota > 0 && !seeds.empty()) {
    const size_t top = std::min<size_t>(seeds.size(), static_cast<size_t>(options.local_seeds));
    const size_t per_seed = static_cast<size_t>(std::max(options.local_mutations, 1));
    std::vector<uint64_t> mseed(top * per_seed);
    for (uint64_t& x : mseed) x = rng();
    std::vector<std::optional<Candidate>> neigh(mseed.size());
    pool.For(mseed.size(), [&](size_t i) {
      std::mt19937_64 local_rng(mseed[i]);
      auto m = space.Mutate(seeds[i / per_seed], local_rng, &seen);
      if (m.ok()) neigh[i] = std::move(*m);
    });
    std::vector<Candidate> cands;
    std::set<std::vector<int64_t>> seen;
    for (auto& c : neigh) {
      if (c && seen.insert(c->decisions).second) cands.push_back(std::move(*c));
    }
    std::vector<float> scores;
    std::vector<char> ok;
    std::vector<size_t> programs;
    if (absl::Status s = cache.Score(cands, /*drop_schedules=*/false, &scores, &ok, &programs);
        !s.ok()) {
      return s;
    }
    std::vector<size_t> order;
    for (size_t i = 0; i < cands.size(); ++i) {
      if (ok[i]) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return scores[a] > scores[b]; });
    int taken = 0;
    for (size_t i : order) {
      if (taken >= local_quota) break;
      taken += take(cands[i], programs[i]) ? 1 : 0;
    }
    st.local = taken;
  }
  std::vector<Scored> ranked;
  ranked.reserve(best.size());
  for (auto& [k, s] : best) ranked.push_back(std::move(s));
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Scored& a, const Scored& b) { return a.score > b.score; });
  int greedy = batch - static_cast<int>(batch * options.eps_greedy + 0.5);
  for (const Scored& s : ranked) {
    if (static_cast<int>(out.size()) >= greedy) break;
    take(generations[s.gen][s.idx], s.program);
  }
  random_fill(batch);
  // Candidates of the evolved generations gave up their schedules once scored: replay the
  // few the batch took, so that every candidate returned holds its schedule.
  std::vector<size_t> bare;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].schedule) bare.push_back(i);
  }
  pool.For(bare.size(), [&](size_t k) {
    Candidate& c = out[bare[k]];
    auto s = space.Apply(c);
    if (s.ok()) c.schedule = std::make_shared<const ir::Schedule>(std::move(*s));
  });
  // The round's candidates are freed on every core (the batch holds its own copies), and
  // counted in the round's time.
  for (std::vector<Candidate>& g : generations) {
    pool.For(g.size(), [&](size_t i) { g[i] = Candidate(); });
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace lathe::tuner
