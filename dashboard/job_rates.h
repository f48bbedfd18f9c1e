// \file
// How fast each job measures, for the dashboard's estimate of the time left: samples of a
// job's trials done over time, and the rate over the last few minutes. A job that just
// started (or a daemon that just started) has no rate until kMinSpan of samples exists; one
// that stopped progressing sees its rate fall towards 0 as the window slides.
//
// Thread-safety: every method may be called from any thread.
#ifndef LATHE_DASHBOARD_JOB_RATES_H_
#define LATHE_DASHBOARD_JOB_RATES_H_

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace lathe::dashboard {

class JobRates {
 public:
  static constexpr int64_t kWindowMs = 5 * 60 * 1000;  // the rate is taken over this long
  static constexpr int64_t kMinSpanMs = 5000;          // no rate from a shorter history

  // Job `id` had `done` trials at `now_ms` (unix ms, non-decreasing per job).
  void Observe(const std::string& id, int64_t now_ms, int64_t done);
  // Trials per second from the oldest sample in the window to `now_ms`; nullopt before
  // kMinSpanMs of history.
  std::optional<double> Rate(const std::string& id, int64_t now_ms) const;
  // Forgets every job not in `live`.
  void Retain(const std::set<std::string>& live);

 private:
  struct Sample {
    int64_t t_ms;
    int64_t done;
  };
  mutable std::mutex mu_;
  std::map<std::string, std::deque<Sample>> samples_;
};

// Seconds left for `remaining` trials at `rate` trials/s; nullopt without a positive rate.
std::optional<double> SecondsLeft(int64_t remaining, std::optional<double> rate);

}  // namespace lathe::dashboard

#endif  // LATHE_DASHBOARD_JOB_RATES_H_
