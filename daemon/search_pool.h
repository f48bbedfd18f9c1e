// \file
// The search threads of lathed (`--search-threads N`): N threads at a lower scheduling priority
// that every job's tuning driver shares for its background search rounds (tuner/driver.h
// SearchPool). At most N rounds are searched at once, whatever the number of jobs and tasks; a
// round that starts while k rounds run (itself included) scores on N / k threads (at least 1),
// so that one task alone still uses every search thread. The threads are niced as NicedRunner's
// (niced_runner.h): the threads answering workers keep their latency.
//
// Thread-safety: every method may be called from any thread.
#ifndef LATHE_DAEMON_SEARCH_POOL_H_
#define LATHE_DAEMON_SEARCH_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tuner/driver.h"

namespace lathe::daemon {

class NicedSearchPool : public tuner::SearchPool {
 public:
  // `threads` >= 1 (clamped); `nice` 0..19 (0: the daemon's priority).
  NicedSearchPool(int threads, int nice);
  // Finishes the rounds queued, then joins the threads.
  ~NicedSearchPool() override;
  NicedSearchPool(const NicedSearchPool&) = delete;
  NicedSearchPool& operator=(const NicedSearchPool&) = delete;

  bool TryReserve() override;
  void Run(std::function<void(int threads)> fn) override;

  int threads() const { return threads_; }
  // Rounds running now and the most that ever ran at once (for tests and metrics).
  int running() const;
  int max_running() const;

 private:
  void Loop();

  const int threads_;
  const int nice_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int reserved_ = 0;  // reserved, queued or running
  int running_ = 0;
  int max_running_ = 0;
  bool quit_ = false;
  std::deque<std::function<void(int)>> queue_;
  std::vector<std::thread> pool_;
};

}  // namespace lathe::daemon

#endif  // LATHE_DAEMON_SEARCH_POOL_H_
