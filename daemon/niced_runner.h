// \file
// A thread of its own at a lower scheduling priority (nice value) that runs closures for a
// caller and waits for each: lathed's job threads run their heavy parts (search rounds,
// featurization, retraining) this way while they themselves keep normal priority. They take
// the jobs' and the lease registry's locks, and a lock holder starved of CPU by the very threads
// that wait for the lock (priority inversion) would bring back the latency that the nice value
// is there to remove. Linux nice values are per thread and inherited by the threads a thread
// creates (the search's worker pool). Failing to lower the priority is harmless: the closures
// then run at full priority.
//
// Thread-safety: Run may be called from one thread at a time.
#ifndef LATHE_DAEMON_NICED_RUNNER_H_
#define LATHE_DAEMON_NICED_RUNNER_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace lathe::daemon {

// Lowers the calling thread's scheduling priority to `nice` (0..19; <= 0: unchanged).
void NiceThisThread(int nice);

// Names the calling thread (at most 15 bytes are kept) as `top -H`, perf and /proc show it: a
// thread otherwise carries the name of the one that started it (a gRPC server thread's).
void NameThisThread(const char* name);

// Runs closures on one thread of its own at nice value `nice`, started on first use and kept
// until destruction (a thread per call would cost a clone and a setpriority each).
class NicedRunner {
 public:
  explicit NicedRunner(int nice) : nice_(nice) {}
  ~NicedRunner();
  NicedRunner(const NicedRunner&) = delete;
  NicedRunner& operator=(const NicedRunner&) = delete;

  // Runs `fn` on the niced thread (inline when nice <= 0) and returns when it has returned.
  void Run(const std::function<void()>& fn);

 private:
  void Loop();

  const int nice_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void()>* fn_ = nullptr;  // the closure to run; null when done
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace lathe::daemon

#endif  // LATHE_DAEMON_NICED_RUNNER_H_
