#include "tuner/driver.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "cost_model/database_io.h"
#include "cost_model/xgb_model.h"
#include "ir/trace.h"
#include "proto/trace_io.h"
#include "tuner/task_scheduler.h"
#include "tuner/tune_common.h"

namespace lathe::tuner {

namespace {

// A task's in-flight work can run at most this many rounds ahead of its results (lathed: a
// greedy fleet cannot make the search run far ahead of the results that teach the model).
constexpr int kMaxInflightRounds = 4;

// A candidate's trace in its two serialized forms: the JSON its record stores and the
// request that carries it to a worker (its workload, the trace as a message).
struct SerializedTrace {
  std::string json;
  lathe::v1::MeasureRequest request;
};

SerializedTrace SerializeTrace(const ir::Trace& trace, const ir::Workload& workload) {
  SerializedTrace s;
  s.json = traceio::TraceToJson(trace);
  s.request.set_workload(workload.canonical);
  traceio::SetRequestTrace(trace, &s.request);
  return s;
}

// The driver's own view of a task, beside its public TaskStatus.
struct TaskState {
  ProgramSet measured;   // programs stored or dispatched
  int inflight = 0;      // of `measured`: dispatched, not reported
  bool stalled = false;  // searched nothing new while trials were outstanding
  std::vector<std::pair<int, double>> history;  // (trials, best latency) for the scheduler
  int history_at = 0;                           // trials at the last history point
  bool searching = false;                       // a background search is in flight
  int search_want = 0;                          // the candidates it was asked for
  SeedCache seeds;                              // read on the Heavy thread only
};

// A round searched on a SearchPool thread: its inputs are copies, so that the driver's thread
// goes on meanwhile. The search thread also serializes the candidates' traces: per-candidate
// work that would otherwise queue on the one driver thread of the job, which every round of
// every task passes through. (The seeds are read on the driver's side: a niced search thread
// holding the job's database connection would keep the driver thread, which needs it for every
// dispatch, waiting behind a low priority.)
struct BackgroundSearch {
  size_t task = 0;
  int want = 0;
  bool first_round = false;
  std::mt19937_64 rng;
  ProgramSet measured;
  std::vector<Candidate> seeds;
  std::shared_ptr<const cost_model::CostModel> model;
  absl::StatusOr<std::vector<Candidate>> result = absl::UnknownError("no search ran");
  std::vector<SerializedTrace> traces;  // of each candidate of `result`, in order
  std::vector<ir::ProgramId> programs;  // likewise (hashing a trace is per-candidate work too)
};

class Driver {
 public:
  Driver(std::vector<DriverTask>& tasks, const DriverOptions& o, db::Database& database,
         Runner& runner, const std::function<void(const DriverProgress&)>& progress)
      : tasks_(tasks), o_(o), db_(database), runner_(runner), progress_(progress) {}

  absl::StatusOr<DriverResult> Run();

 private:
  absl::Status Init();
  // The scheduler's view of every task now, with the runner's counts per task and the budget
  // left (less the trials that background searches under way will propose: `background`).
  std::vector<TaskView> Views(bool background, std::vector<Runner::Counts>* counts,
                              int* budget_left) const;
  // Dispatches rounds while the runner has room and a task is eligible. Returns whether the
  // runner's room (rather than the tasks) is what stopped it.
  absl::StatusOr<bool> DispatchRounds();
  // DispatchRounds with a search pool: dispatches the rounds whose searches ended, then starts
  // searches for eligible tasks while the runner has room and the pool a free thread. Returns
  // whether the runner's room is what stopped it.
  absl::StatusOr<bool> DispatchBackground();
  // Dispatches the rounds of the background searches that ended; the first error of a search
  // or of the runner.
  absl::Status CollectSearches();
  // Waits until no background search is running (results dropped).
  void DrainSearches();
  // Hands the candidates of a round of task `i` to the runner, those not measured yet.
  struct Dispatched {
    size_t taken = 0;
    size_t skipped = 0;  // stored by someone else meanwhile (Runner::Dispatch)
  };
  // `traces` and `programs`, when they hold one entry per candidate, are the candidates'
  // serialized traces and programs (computed on a search thread); else they are computed here.
  absl::StatusOr<Dispatched> DispatchCandidates(size_t i, std::vector<Candidate> next,
                                                std::vector<SerializedTrace> traces = {},
                                                const std::vector<ir::ProgramId>& programs = {});
  // A round of task `i` found nothing new: exhausted, or stalled until an outcome.
  void MarkDry(size_t i);
  // search_model_: a copy of model_ as last trained (background searches read it).
  void RefreshSearchModel();
  void Absorb(const TrialOutcome& o);
  // Trains the model with the outcomes absorbed since the last call, saving it after a
  // retraining.
  void FlushModel();
  void Retime();
  void Report(bool end_of_round);
  void Heavy(const std::function<void()>& fn) {
    if (o_.run_heavy) {
      o_.run_heavy(fn);
    } else {
      fn();
    }
  }
  double CurrentObjective() const;
  int TotalDone() {
    int n = 0;
    for (size_t i = 0; i < tasks_.size(); ++i) n += runner_.Progress(static_cast<int>(i)).done;
    return n;
  }
  bool Closed(size_t i) {
    if (status_[i].exhausted) return true;
    return tasks_[i].cap > 0 && runner_.Progress(static_cast<int>(i)).done >= tasks_[i].cap;
  }

  std::vector<DriverTask>& tasks_;
  const DriverOptions& o_;
  db::Database& db_;
  Runner& runner_;
  const std::function<void(const DriverProgress&)>& progress_;

  std::vector<TaskStatus> status_;
  std::vector<TaskState> state_;
  cost_model::CostModel model_;
  int64_t saved_trained_on_ = 0;
  std::unique_ptr<TaskScheduler> scheduler_;
  std::mt19937_64 rng_;
  int round_size_ = 0;
  int rounds_ = 0;
  int run_trials_ = 0;  // outcomes counted in this run (the curve's x axis)
  int errors_ = 0;
  // Dispatched, not reported: candidate id -> (task, candidate).
  std::map<std::string, std::pair<int, Candidate>> inflight_;
  // Measured candidates not yet given to the model.
  struct Learn {
    int task = 0;
    std::string candidate_id;
    Candidate candidate;
    double throughput = 0;  // 1 / median for ok results, else 0
  };
  std::vector<Learn> learn_;
  // Background searches (DriverOptions::search_pool).
  std::shared_ptr<const cost_model::CostModel> search_model_;
  int64_t search_model_on_ = -1;  // model_.trained_on() of the snapshot; -1: untrained
  std::mutex search_mu_;
  std::condition_variable search_cv_;
  int searching_ = 0;  // started, not finished
  std::vector<std::shared_ptr<BackgroundSearch>> finished_;
};

absl::Status Driver::Init() {
  const size_t n = tasks_.size();
  status_.assign(n, TaskStatus{});
  state_.assign(n, TaskState{});
  std::vector<ir::Workload> wls;
  for (size_t i = 0; i < n; ++i) {
    const ir::Workload& w = tasks_[i].workload;
    absl::StatusOr<ProgramSet> keys = MeasuredPrograms(db_, w.key, o_.device_class);
    if (!keys.ok()) return keys.status();
    state_[i].measured = std::move(*keys);
    status_[i].total_measured = static_cast<int64_t>(state_[i].measured.size());
    if (auto b = db_.Best(w.key, o_.device_class); b.ok() && b->has_value()) {
      status_[i].best_latency_us = (*b)->median_us;
      status_[i].best_gflops = (*b)->Gflops();
    }
    status_[i].trials = runner_.Progress(static_cast<int>(i)).done;
    wls.push_back(w);
  }
  if (o_.use_cost_model) model_ = InitialModel(db_, wls, o_.device_class);
  saved_trained_on_ = model_.trained() ? model_.trained_on() : 0;
  absl::StatusOr<std::unique_ptr<TaskScheduler>> s = MakeTaskScheduler(o_.scheduler);
  if (!s.ok()) return s.status();
  scheduler_ = std::move(*s);
  rng_.seed(o_.seed);
  round_size_ = RoundSize(o_.batch, o_.budget, static_cast<int>(n));
  // A resumed run (lathed after a restart) has had rounds already: no second warm-up.
  for (size_t i = 0; i < n; ++i) {
    const int done = status_[i].trials;
    if (done <= 0) continue;
    status_[i].rounds = (done + round_size_ - 1) / round_size_;
    state_[i].history.emplace_back(done, status_[i].best_latency_us);
    state_[i].history_at = done;
  }
  return absl::OkStatus();
}

std::vector<TaskView> Driver::Views(bool background, std::vector<Runner::Counts>* counts,
                                    int* budget_left) const {
  const size_t n = tasks_.size();
  int done = 0, outstanding = 0, reserved = 0;
  counts->assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    (*counts)[i] = runner_.Progress(static_cast<int>(i));
    done += (*counts)[i].done;
    outstanding += (*counts)[i].outstanding;
    if (background) reserved += state_[i].search_want;
  }
  *budget_left = o_.budget - done - outstanding - reserved;
  std::vector<TaskView> views(n);
  for (size_t i = 0; i < n; ++i) {
    TaskView& v = views[i];
    const DriverTask& t = tasks_[i];
    const Runner::Counts& c = (*counts)[i];
    v.weight = t.weight;
    v.flops = t.workload.flops;
    v.op = t.workload.spec.op;
    v.trials = c.done;
    v.rounds = status_[i].rounds;
    v.best_us = status_[i].best_latency_us;
    v.history = state_[i].history;
    const int cap_left = t.cap > 0 ? t.cap - c.done - c.outstanding : *budget_left;
    // In the background, one search in flight per task.
    v.eligible = !(background && state_[i].searching) && *budget_left > 0 && cap_left > 0 &&
                 !status_[i].exhausted && !state_[i].stalled &&
                 c.outstanding < kMaxInflightRounds * round_size_;
  }
  return views;
}

absl::StatusOr<bool> Driver::DispatchRounds() {
  for (;;) {
    // A stopping runner takes nothing more: searching on would never end (nothing dispatched
    // counts against the budget).
    if (runner_.Stopping()) return false;
    if (runner_.Room() <= 0) return true;
    std::vector<Runner::Counts> counts;
    int budget_left = 0;
    std::vector<TaskView> views = Views(/*background=*/false, &counts, &budget_left);
    const int pick = scheduler_->Next(views, rng_);
    if (pick < 0) return false;
    const size_t i = static_cast<size_t>(pick);
    const DriverTask& t = tasks_[i];
    int want = std::min(round_size_, budget_left);
    if (t.cap > 0) want = std::min(want, t.cap - counts[i].done - counts[i].outstanding);

    absl::StatusOr<std::vector<Candidate>> next = absl::UnknownError("no search ran");
    Heavy([&] {
      FlushModel();
      std::vector<Candidate> seeds = SeedsFromDatabase(db_, *t.space, t.workload, o_.device_class,
                                                       o_.seed_records, &state_[i].seeds);
      // A task's first round starts with the space's rule-picked candidates.
      next = NextRound(*t.space, model_, seeds, state_[i].measured, want, o_.search, rng_,
                       /*rule_picked_first=*/status_[i].rounds == 0);
    });
    if (!next.ok()) {
      return absl::Status(next.status().code(), absl::StrCat("search for '", t.workload.canonical,
                                                             "': ", next.status().message()));
    }
    absl::StatusOr<Dispatched> sent = DispatchCandidates(i, std::move(*next));
    if (!sent.ok()) return sent.status();
    if (sent->taken == 0) {
      if (sent->skipped > 0) continue;  // others measured them: the next search proposes more
      MarkDry(i);
      continue;
    }
    ++status_[i].rounds;
    ++rounds_;
  }
}

absl::StatusOr<Driver::Dispatched> Driver::DispatchCandidates(
    size_t i, std::vector<Candidate> next, std::vector<SerializedTrace> traces,
    const std::vector<ir::ProgramId>& programs) {
  const DriverTask& t = tasks_[i];
  const bool serialized = traces.size() == next.size();
  const bool hashed = programs.size() == next.size();
  std::vector<Trial> trials;
  for (size_t k = 0; k < next.size(); ++k) {
    Candidate& c = next[k];
    const ir::ProgramId key = hashed ? programs[k] : ProgramOf(c);
    if (!state_[i].measured.insert(key).second) continue;
    Trial tr;
    tr.task = static_cast<int>(i);
    tr.candidate_id = CandidateId(t.workload.key, key, o_.device_class);
    SerializedTrace st = serialized ? std::move(traces[k]) : SerializeTrace(c.trace, t.workload);
    tr.trace_json = std::move(st.json);
    tr.request = std::move(st.request);
    lathe::v1::MeasureRequest& req = tr.request;
    req.set_candidate_id(tr.candidate_id);
    req.set_min_repeat_ms(o_.min_repeat_ms);
    req.set_flush_cache(o_.flush_cache);
    req.set_cold_weights(o_.cold_weights);
    if (o_.cutoff_factor > 0 && status_[i].best_latency_us > 0) {
      req.set_cutoff_us(o_.cutoff_factor * status_[i].best_latency_us);
    }
    inflight_.emplace(tr.candidate_id, std::make_pair(static_cast<int>(i), std::move(c)));
    trials.push_back(std::move(tr));
  }
  const size_t trials_size = trials.size();
  absl::StatusOr<std::vector<std::string>> skipped = runner_.Dispatch(std::move(trials));
  if (!skipped.ok()) return skipped.status();
  for (const std::string& id : *skipped) inflight_.erase(id);
  state_[i].inflight += static_cast<int>(trials_size - skipped->size());
  return Dispatched{trials_size - skipped->size(), skipped->size()};
}

void Driver::MarkDry(size_t i) {
  if (runner_.Progress(static_cast<int>(i)).outstanding == 0) {
    status_[i].exhausted = true;  // nothing new to measure for this task
  } else {
    state_[i].stalled = true;  // wait for an outcome before searching it again
  }
}

void Driver::RefreshSearchModel() {
  const int64_t on = model_.trained() ? model_.trained_on() : -1;
  if (search_model_ != nullptr && on == search_model_on_) return;
  std::shared_ptr<const cost_model::CostModel> snapshot;
  if (model_.trained()) {
    // A copy through its bytes: the searches read it while this thread updates model_.
    absl::StatusOr<std::string> bytes = model_.Save();
    if (bytes.ok()) {
      absl::StatusOr<cost_model::CostModel> copy = cost_model::CostModel::Load(*bytes);
      if (copy.ok()) snapshot = std::make_shared<const cost_model::CostModel>(std::move(*copy));
    }
    // A copy that failed keeps the previous snapshot (or an untrained one).
    if (snapshot == nullptr && search_model_ != nullptr) return;
  }
  if (snapshot == nullptr) snapshot = std::make_shared<const cost_model::CostModel>();
  search_model_ = std::move(snapshot);
  search_model_on_ = on;
}

absl::StatusOr<bool> Driver::DispatchBackground() {
  if (absl::Status st = CollectSearches(); !st.ok()) return st;
  for (;;) {
    if (runner_.Stopping()) return false;
    if (runner_.Room() <= 0) return true;
    std::vector<Runner::Counts> counts;
    int budget_left = 0;
    std::vector<TaskView> views = Views(/*background=*/true, &counts, &budget_left);
    bool any = false;
    for (const TaskView& v : views) any = any || v.eligible;
    if (!any) return false;
    // Every search thread busy: wait for one to end (Wake) or for outcomes.
    if (!o_.search_pool->TryReserve()) return false;
    const int pick = scheduler_->Next(views, rng_);
    if (pick < 0) {
      o_.search_pool->Run([](int) {});  // gives the reservation back
      return false;
    }
    const size_t i = static_cast<size_t>(pick);
    const DriverTask& t = tasks_[i];
    int want = std::min(round_size_, budget_left);
    if (t.cap > 0) want = std::min(want, t.cap - counts[i].done - counts[i].outstanding);

    auto search = std::make_shared<BackgroundSearch>();
    search->task = i;
    search->want = want;
    search->rng.seed(rng_());
    search->first_round = status_[i].rounds == 0;
    search->measured = state_[i].measured;
    Heavy([&] {
      FlushModel();
      RefreshSearchModel();
      search->seeds = SeedsFromDatabase(db_, *t.space, t.workload, o_.device_class, o_.seed_records,
                                        &state_[i].seeds);
    });
    search->model = search_model_;
    state_[i].searching = true;
    state_[i].search_want = want;
    {
      std::lock_guard<std::mutex> lock(search_mu_);
      ++searching_;
    }
    o_.search_pool->Run([this, search](int threads) mutable {
      SearchOptions so = o_.search;
      so.threads = threads;
      const DriverTask& task = tasks_[search->task];
      search->result = NextRound(*task.space, *search->model, search->seeds, search->measured,
                                 search->want, so, search->rng, search->first_round);
      if (search->result.ok()) {
        search->traces.reserve(search->result->size());
        search->programs.reserve(search->result->size());
        for (const Candidate& c : *search->result) {
          search->traces.push_back(SerializeTrace(c.trace, task.workload));
          search->programs.push_back(ProgramOf(c));
        }
      }
      {
        std::lock_guard<std::mutex> lock(search_mu_);
        finished_.push_back(std::move(search));
      }
      runner_.Wake();
      // Last: once searching_ is 0, DrainSearches may return and the driver go away.
      std::lock_guard<std::mutex> lock(search_mu_);
      --searching_;
      search_cv_.notify_all();
    });
  }
}

absl::Status Driver::CollectSearches() {
  std::vector<std::shared_ptr<BackgroundSearch>> finished;
  {
    std::lock_guard<std::mutex> lock(search_mu_);
    finished.swap(finished_);
  }
  absl::Status first_error;
  for (std::shared_ptr<BackgroundSearch>& s : finished) {
    const size_t i = s->task;
    state_[i].searching = false;
    state_[i].search_want = 0;
    if (!first_error.ok()) continue;
    if (!s->result.ok()) {
      first_error = absl::Status(s->result.status().code(),
                                 absl::StrCat("search for '", tasks_[i].workload.canonical,
                                              "': ", s->result.status().message()));
      continue;
    }
    if (runner_.Stopping()) continue;
    // The budget and the task's cap as they stand now (outcomes arrived while it searched).
    int done = 0, outstanding = 0, reserved = 0;
    for (size_t k = 0; k < tasks_.size(); ++k) {
      const Runner::Counts c = runner_.Progress(static_cast<int>(k));
      done += c.done;
      outstanding += c.outstanding;
      reserved += state_[k].search_want;
    }
    int room = o_.budget - done - outstanding - reserved;
    const Runner::Counts c = runner_.Progress(static_cast<int>(i));
    if (tasks_[i].cap > 0) room = std::min(room, tasks_[i].cap - c.done - c.outstanding);
    std::vector<Candidate>& next = *s->result;
    if (static_cast<int>(next.size()) > std::max(0, room)) {
      next.resize(std::max(0, room));
      s->traces.resize(next.size());
      s->programs.resize(next.size());
    }
    if (next.empty() && room <= 0) continue;
    absl::StatusOr<Dispatched> sent =
        DispatchCandidates(i, std::move(next), std::move(s->traces), s->programs);
    if (!sent.ok()) {
      first_error = sent.status();
      continue;
    }
    if (sent->taken == 0) {
      if (sent->skipped == 0) MarkDry(i);
      continue;
    }
    ++status_[i].rounds;
    ++rounds_;
  }
  return first_error;
}

void Driver::DrainSearches() {
  if (o_.search_pool == nullptr) return;
  std::unique_lock<std::mutex> lock(search_mu_);
  search_cv_.wait(lock, [&] { return searching_ == 0; });
  finished_.clear();
}

void Driver::Absorb(const TrialOutcome& out) {
  if (out.task < 0 || static_cast<size_t>(out.task) >= tasks_.size()) return;
  const size_t i = static_cast<size_t>(out.task);
  TaskStatus& st = status_[i];
  TaskState& state = state_[i];
  auto it = inflight_.find(out.candidate_id);
  if (out.kind == TrialOutcome::Kind::kWithdrawn) {
    // Never measured: the search may propose it again.
    if (it != inflight_.end()) {
      state.measured.erase(ProgramOf(it->second.second));
      inflight_.erase(it);
      --state.inflight;
    }
    return;
  }
  if (out.kind == TrialOutcome::Kind::kForeign) {
    state.measured.insert(out.program);
  }
  state.stalled = false;
  const bool ok = out.error_class == db::ErrorClass::kOk && out.median_us > 0;
  if (ok && (st.best_latency_us <= 0 || out.median_us < st.best_latency_us)) {
    st.best_latency_us = out.median_us;
    st.best_gflops = tasks_[i].workload.flops / (out.median_us * 1e3);
  }
  if (out.counted) {
    ++run_trials_;
    if (!ok) {
      ++errors_;
      ++st.errors[std::string(db::ErrorClassName(out.error_class))];
    }
    st.curve.emplace_back(run_trials_, st.best_gflops);
  }
  if (it != inflight_.end()) {
    if (o_.use_cost_model) {
      learn_.push_back(Learn{static_cast<int>(i), out.candidate_id, std::move(it->second.second),
                             ok ? 1.0 / out.median_us : 0.0});
    }
    inflight_.erase(it);
    --state.inflight;
  }
  const Runner::Counts c = runner_.Progress(out.task);
  st.trials = c.done;
  st.total_measured = static_cast<int64_t>(state.measured.size()) - state.inflight;
  // The scheduler's history: a point per round's worth of trials, and when a round is in.
  if (c.done > state.history_at &&
      (c.done - state.history_at >= round_size_ || c.outstanding == 0)) {
    state.history.emplace_back(c.done, st.best_latency_us);
    state.history_at = c.done;
  }
}

void Driver::FlushModel() {
  if (!o_.use_cost_model || learn_.empty()) return;
  std::vector<cost_model::FeatureMatrix> programs;
  std::vector<double> throughputs;
  std::vector<std::string> keys;
  std::vector<std::string> ok_ids;  // ok records, whose features the database keeps
  for (Learn& l : learn_) {
    // The search's features where it ranked the candidate; lowered here only for the
    // candidates it did not (random samples, rule-picked ones).
    if (l.candidate.features != nullptr) {
      programs.push_back(*l.candidate.features);
    } else {
      absl::StatusOr<cost_model::FeatureMatrix> f =
          CandidateFeatures(*tasks_[l.task].space, l.candidate);
      if (!f.ok()) continue;
      programs.push_back(std::move(*f));
    }
    throughputs.push_back(l.throughput);
    keys.push_back(tasks_[l.task].workload.key);
    ok_ids.push_back(l.throughput > 0 ? l.candidate_id : std::string());
  }
  learn_.clear();
  std::vector<std::string> store_ids;
  std::vector<const cost_model::FeatureMatrix*> store;
  for (size_t k = 0; k < programs.size(); ++k) {
    if (ok_ids[k].empty()) continue;
    store_ids.push_back(ok_ids[k]);
    store.push_back(&programs[k]);
  }
  // A failure to store costs a lowering at a later start, nothing else.
  if (!store.empty()) (void)cost_model::SaveFeatures(db_, store_ids, store);
  // A failed retraining keeps the previous model; tuning goes on with it.
  if (!programs.empty()) (void)model_.Update(programs, throughputs, keys);
  if (model_.trained() && model_.trained_on() != saved_trained_on_) {
    if (cost_model::SaveToDatabase(db_, o_.device_class, model_).ok()) {
      saved_trained_on_ = model_.trained_on();
    }
  }
}

double Driver::CurrentObjective() const {
  std::vector<double> weights, latencies;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    weights.push_back(tasks_[i].weight);
    latencies.push_back(status_[i].best_latency_us);
  }
  return Objective(weights, latencies);
}

void Driver::Report(bool end_of_round) {
  if (!progress_) return;
  DriverProgress p;
  p.trials_done = TotalDone();
  p.budget = o_.budget;
  p.round = rounds_;
  p.end_of_round = end_of_round;
  p.errors = errors_;
  p.tasks = &status_;
  p.objective_us = CurrentObjective();
  progress_(p);
}

void Driver::Retime() {
  const size_t n = tasks_.size();
  std::vector<double> weights, latencies;
  for (size_t i = 0; i < n; ++i) {
    weights.push_back(tasks_[i].weight);
    latencies.push_back(status_[i].best_latency_us);
  }
  const std::vector<int> tops = RetimeCounts(weights, latencies, o_.remeasure_top);
  std::vector<std::set<std::string>> tried(n);
  for (size_t i = 0; i < n; ++i) {
    if (auto b = db_.Best(tasks_[i].workload.key, o_.device_class); b.ok() && b->has_value()) {
      status_[i].best_before_remeasure_us = (*b)->median_us;
    }
  }
  while (!runner_.Stopping()) {
    std::vector<RetimeRequest> todo;
    for (size_t i = 0; i < n; ++i) {
      const int top = tops[i];
      absl::StatusOr<std::vector<db::Record>> best =
          db_.TopK(tasks_[i].workload.key, o_.device_class, top);
      if (!best.ok()) continue;
      for (db::Record& r : *best) {
        if (r.remeasured_at_ms != 0 || tried[i].count(r.candidate_id) > 0) continue;
        // Past twice the count, the best alone, up to four times it: on a busy machine the
        // re-timed records can read slower than a lucky single figure further down, which must
        // not be left the best (a re-timing in the parallel test suite did so).
        const int tries = static_cast<int>(tried[i].size());
        if (tries >= 4 * top || (tries >= 2 * top && &r != &best->front())) break;
        tried[i].insert(r.candidate_id);
        todo.push_back(RetimeRequest{static_cast<int>(i), r.candidate_id, r.workload,
                                     std::move(r.trace_json), o_.cold_weights});
      }
    }
    if (todo.empty()) break;
    absl::StatusOr<std::vector<bool>> added =
        runner_.Retime(todo, o_.remeasure_ms, [&](int done, int total) {
          if (!progress_) return;
          DriverProgress p;
          p.trials_done = TotalDone();
          p.budget = o_.budget;
          p.round = rounds_;
          p.errors = errors_;
          p.tasks = &status_;
          p.objective_us = CurrentObjective();
          p.remeasure_done = done;
          p.remeasure_total = total;
          progress_(p);
        });
    if (!added.ok()) break;  // keep what is stored
    for (size_t k = 0; k < todo.size() && k < added->size(); ++k) {
      ++((*added)[k] ? status_[todo[k].task].remeasured : status_[todo[k].task].remeasure_failed);
    }
  }
  // A re-timing can move the best either way: the database's figure is the task's now.
  for (size_t i = 0; i < n; ++i) {
    if (auto b = db_.Best(tasks_[i].workload.key, o_.device_class); b.ok() && b->has_value()) {
      status_[i].best_latency_us = (*b)->median_us;
      status_[i].best_gflops = (*b)->Gflops();
    }
  }
}

absl::StatusOr<DriverResult> Driver::Run() {
  if (absl::Status st = Init(); !st.ok()) return st;
  DriverResult result;
  for (;;) {
    if (runner_.Stopping()) {
      result.stopped = true;
      break;
    }
    bool all_closed = true;
    for (size_t i = 0; i < tasks_.size(); ++i) all_closed = all_closed && Closed(i);
    if (TotalDone() >= o_.budget || all_closed) {
      result.space_exhausted = all_closed && TotalDone() < o_.budget;
      break;
    }
    absl::StatusOr<bool> room_bound =
        o_.search_pool != nullptr ? DispatchBackground() : DispatchRounds();
    if (!room_bound.ok()) {
      DrainSearches();
      (void)runner_.Finish();
      return room_bound.status();
    }
    absl::StatusOr<std::vector<TrialOutcome>> outcomes = runner_.Wait(*room_bound);
    if (!outcomes.ok()) {
      DrainSearches();
      (void)runner_.Finish();
      return outcomes.status();
    }
    for (const TrialOutcome& out : *outcomes) Absorb(out);
    if (!outcomes->empty()) {
      bool idle = true;
      for (size_t i = 0; i < tasks_.size(); ++i) {
        idle = idle && runner_.Progress(static_cast<int>(i)).outstanding == 0;
      }
      Report(/*end_of_round=*/idle);
    }
  }
  // The rounds still searched are not needed: the budget is spent or the run stops.
  DrainSearches();
  if (absl::Status st = runner_.Finish(); !st.ok()) return st;
  if (!result.stopped) {
    Heavy([&] { FlushModel(); });
    runner_.TrialsFinished();
    if (o_.remeasure_top > 0) Retime();
    result.stopped = runner_.Stopping();
  }
  result.tasks = status_;
  result.trials = run_trials_;
  result.objective_us = CurrentObjective();
  return result;
}

}  // namespace

std::vector<int> RetimeCounts(const std::vector<double>& weights,
                              const std::vector<double>& latencies_us, int top) {
  const size_t n = weights.size();
  double total = 0;
  for (size_t i = 0; i < n && i < latencies_us.size(); ++i) {
    if (latencies_us[i] > 0) total += weights[i] * latencies_us[i];
  }
  std::vector<int> counts(n, top);
  if (n <= 1 || !(total > 0)) return counts;
  for (size_t i = 0; i < n; ++i) {
    const double lat = i < latencies_us.size() ? latencies_us[i] : 0;
    if (!(lat > 0)) continue;  // nothing measured yet: as many as asked
    // A task with the average share gets `top`; its error can move the objective by its share.
    const double scaled = top * (weights[i] * lat / total) * static_cast<double>(n);
    counts[i] = std::clamp(static_cast<int>(std::ceil(scaled)), 1, top);
  }
  return counts;
}

double Objective(const std::vector<double>& weights, const std::vector<double>& latencies_us) {
  double sum = 0;
  for (size_t i = 0; i < weights.size() && i < latencies_us.size(); ++i) {
    if (!(latencies_us[i] > 0)) return 0;
    sum += weights[i] * latencies_us[i];
  }
  return sum;
}

int RoundSize(int batch, int budget, int num_tasks) {
  if (num_tasks <= 1) return std::max(1, batch);
  // At least 8, unless the budget cannot give every task 8: then what it can give each, so
  // that the warm-up still reaches every task (a model's 61 tasks in 480 trials).
  const int floor = std::min(8, std::max(1, budget / num_tasks));
  return std::max(1, std::min(batch, std::max(floor, budget / (4 * num_tasks))));
}

absl::StatusOr<DriverResult> RunDriver(std::vector<DriverTask>& tasks, const DriverOptions& options,
                                       db::Database& database, Runner& runner,
                                       const std::function<void(const DriverProgress&)>& progress) {
  if (tasks.empty()) return absl::InvalidArgumentError("a tuning run needs at least one task");
  for (const DriverTask& t : tasks) {
    if (!t.space) return absl::InvalidArgumentError("a task without a search space");
  }
  if (options.budget < 1) {
    return absl::InvalidArgumentError(absl::StrCat("trials ", options.budget, " (need >= 1)"));
  }
  Driver d(tasks, options, database, runner, progress);
  return d.Run();
}

}  // namespace lathe::tuner
