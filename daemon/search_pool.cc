#include "daemon/search_pool.h"

#include <algorithm>
#include <utility>

#include "daemon/niced_runner.h"

namespace lathe::daemon {

NicedSearchPool::NicedSearchPool(int threads, int nice)
    : threads_(std::max(1, threads)), nice_(nice) {}

NicedSearchPool::~NicedSearchPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : pool_) t.join();
}

bool NicedSearchPool::TryReserve() {
  std::lock_guard<std::mutex> lock(mu_);
  if (reserved_ >= threads_) return false;
  ++reserved_;
  // Threads start on first use: a daemon without jobs keeps none.
  if (static_cast<int>(pool_.size()) < reserved_) pool_.emplace_back([this] { Loop(); });
  return true;
}

void NicedSearchPool::Run(std::function<void(int threads)> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

int NicedSearchPool::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int NicedSearchPool::max_running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_running_;
}

void NicedSearchPool::Loop() {
  NiceThisThread(nice_);
  NameThisThread("lathe-search");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
    if (queue_.empty()) return;  // quit_ with nothing left
    std::function<void(int)> fn = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    max_running_ = std::max(max_running_, running_);
    const int share = std::max(1, threads_ / running_);
    lock.unlock();
    fn(share);
    fn = nullptr;  // what it holds goes before the next round is taken
    lock.lock();
    --running_;
    --reserved_;
  }
}

}  // namespace lathe::daemon
