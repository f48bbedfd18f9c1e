#include "daemon/niced_runner.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "spdlog/spdlog.h"

namespace lathe::daemon {

void NiceThisThread(int nice) {
  if (nice <= 0) return;
  const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(tid), std::min(nice, 19)) != 0) {
    spdlog::debug("event=search_nice_failed error=\"{}\"", std::strerror(errno));
  }
}

void NameThisThread(const char* name) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s", name);
  pthread_setname_np(pthread_self(), buf);
}

NicedRunner::~NicedRunner() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void NicedRunner::Run(const std::function<void()>& fn) {
  if (nice_ <= 0) {
    fn();
    return;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  std::unique_lock<std::mutex> lock(mu_);
  fn_ = &fn;
  cv_.notify_all();
  cv_.wait(lock, [&] { return fn_ == nullptr; });
}

void NicedRunner::Loop() {
  NiceThisThread(nice_);
  NameThisThread("lathe-niced");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return quit_ || fn_ != nullptr; });
    if (fn_ == nullptr) return;  // quit_ with nothing to run
    const std::function<void()>* fn = fn_;
    lock.unlock();
    (*fn)();
    lock.lock();
    fn_ = nullptr;
    cv_.notify_all();
  }
}

}  // namespace lathe::daemon
