#include "dashboard/job_rates.h"

namespace lathe::dashboard {

void JobRates::Observe(const std::string& id, int64_t now_ms, int64_t done) {
  std::lock_guard<std::mutex> lock(mu_);
  std::deque<Sample>& s = samples_[id];
  // One sample per second is plenty; a newer one replaces the last within that second.
  if (!s.empty() && now_ms - s.back().t_ms < 1000 && s.size() > 1) {
    s.back() = {now_ms, done};
  } else {
    s.push_back({now_ms, done});
  }
  // Keep one sample older than the window, so the window is always covered.
  while (s.size() > 2 && s[1].t_ms <= now_ms - kWindowMs) s.pop_front();
}

std::optional<double> JobRates::Rate(const std::string& id, int64_t now_ms) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = samples_.find(id);
  if (it == samples_.end() || it->second.empty()) return std::nullopt;
  const std::deque<Sample>& s = it->second;
  const Sample& first = s.front();
  const Sample& last = s.back();
  const int64_t span = now_ms - first.t_ms;
  if (span < kMinSpanMs) return std::nullopt;
  return static_cast<double>(last.done - first.done) * 1000.0 / static_cast<double>(span);
}

void JobRates::Retain(const std::set<std::string>& live) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = samples_.begin(); it != samples_.end();) {
    it = live.count(it->first) > 0 ? std::next(it) : samples_.erase(it);
  }
}

std::optional<double> SecondsLeft(int64_t remaining, std::optional<double> rate) {
  if (remaining <= 0) return 0.0;
  if (!rate.has_value() || *rate <= 0) return std::nullopt;
  return static_cast<double>(remaining) / *rate;
}

}  // namespace lathe::dashboard
