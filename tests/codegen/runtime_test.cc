// \file
// Tests of the lathe runtime (codegen/runtime/runtime.h): the parallel-for thread pool and
// aligned allocation, in this process and in child processes with LATHE_NUM_THREADS set.
#include "codegen/runtime/runtime.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

extern char** environ;

namespace {

struct Counts {
  explicit Counts(int64_t n) : hits(static_cast<size_t>(n)) {}
  std::vector<std::atomic<int>> hits;
};

int CountTask(int64_t task, void* closure) {
  static_cast<Counts*>(closure)->hits[static_cast<size_t>(task)].fetch_add(1);
  return 0;
}

void ExpectEachOnce(const Counts& counts) {
  for (size_t i = 0; i < counts.hits.size(); ++i) {
    ASSERT_EQ(counts.hits[i].load(), 1) << "task " << i;
  }
}

TEST(ParallelForTest, RunsEveryTaskExactlyOnce) {
  for (int64_t n : {0, 1, 2, 3, 4, 7, 16, 63, 64, 65, 1000, 100000}) {
    Counts counts(n);
    EXPECT_EQ(lathe_parallel_for(n, CountTask, &counts), 0) << n;
    ExpectEachOnce(counts);
  }
}

TEST(ParallelForTest, NegativeCountRunsNothing) {
  EXPECT_EQ(lathe_parallel_for(-5, CountTask, nullptr), 0);
}

TEST(ParallelForTest, ManyBackToBackCalls) {
  for (int round = 0; round < 2000; ++round) {
    Counts counts(1 + round % 9);
    ASSERT_EQ(lathe_parallel_for(static_cast<int64_t>(counts.hits.size()), CountTask, &counts), 0);
    ExpectEachOnce(counts);
  }
}

int FailOnSeven(int64_t task, void* closure) { return task == 7 ? 42 : 0; }
int FailAlways(int64_t task, void* closure) { return static_cast<int>(task) + 1; }

TEST(ParallelForTest, ReturnsFirstError) {
  EXPECT_EQ(lathe_parallel_for(64, FailOnSeven, nullptr), 42);
  EXPECT_EQ(lathe_parallel_for(1, FailAlways, nullptr), 1);
  // Several tasks fail: the result is one of their codes.
  const int rc = lathe_parallel_for(16, FailAlways, nullptr);
  EXPECT_GE(rc, 1);
  EXPECT_LE(rc, 16);
  // The pool recovers: a following call succeeds.
  Counts counts(33);
  EXPECT_EQ(lathe_parallel_for(33, CountTask, &counts), 0);
  ExpectEachOnce(counts);
}

struct Nested {
  std::vector<std::unique_ptr<Counts>> inner;
};

int OuterTask(int64_t task, void* closure) {
  auto* nested = static_cast<Nested*>(closure);
  Counts* inner = nested->inner[static_cast<size_t>(task)].get();
  return lathe_parallel_for(static_cast<int64_t>(inner->hits.size()), CountTask, inner);
}

TEST(ParallelForTest, NestedCallsRunInline) {
  Nested nested;
  for (int i = 0; i < 8; ++i) nested.inner.push_back(std::make_unique<Counts>(5 + i));
  EXPECT_EQ(lathe_parallel_for(8, OuterTask, &nested), 0);
  for (const auto& inner : nested.inner) ExpectEachOnce(*inner);
}

TEST(ParallelForTest, ConcurrentCallers) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([t, &failures] {
      for (int round = 0; round < 300; ++round) {
        Counts counts(1 + (t * 7 + round) % 40);
        const int64_t n = static_cast<int64_t>(counts.hits.size());
        if (lathe_parallel_for(n, CountTask, &counts) != 0) failures.fetch_add(1);
        for (const auto& hit : counts.hits) {
          if (hit.load() != 1) failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ParallelForTest, PoolHasAtLeastOneThread) { EXPECT_GE(lathe_num_threads(), 1); }

TEST(AllocTest, AlignedAndFreeable) {
  for (int64_t bytes : {0, 1, 63, 64, 65, 4096, 1 << 20}) {
    void* ptr = lathe_alloc(bytes);
    ASSERT_NE(ptr, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ptr) % 64, 0u) << bytes;
    if (bytes > 0) static_cast<char*>(ptr)[bytes - 1] = 1;
    lathe_free(ptr);
  }
  EXPECT_EQ(lathe_alloc(-1), nullptr);
  EXPECT_EQ(lathe_alloc(INT64_MAX), nullptr);
  lathe_free(nullptr);
}

// --- LATHE_NUM_THREADS, checked in child processes (the pool is sized once per process) ---

struct ThreadSet {
  std::mutex mu;
  std::set<std::thread::id> ids;
};

int RecordThread(int64_t task, void* closure) {
  auto* set = static_cast<ThreadSet*>(closure);
  usleep(2000);  // long enough that every pool thread gets tasks
  std::lock_guard<std::mutex> lock(set->mu);
  set->ids.insert(std::this_thread::get_id());
  return 0;
}

// Runs only inside the child spawned below: checks the pool size against
// LATHE_RUNTIME_TEST_EXPECT_THREADS.
TEST(ParallelForChild, PoolSize) {
  const char* expect = getenv("LATHE_RUNTIME_TEST_EXPECT_THREADS");
  if (expect == nullptr) GTEST_SKIP() << "runs only as a child of NumThreadsEnvironment";
  const int expected = atoi(expect);
  EXPECT_EQ(lathe_num_threads(), expected);
  ThreadSet set;
  EXPECT_EQ(lathe_parallel_for(64, RecordThread, &set), 0);
  EXPECT_LE(static_cast<int>(set.ids.size()), expected);
  if (expected > 1) {
    EXPECT_GE(static_cast<int>(set.ids.size()), 2);
  }
}

int RunChild(const std::string& num_threads, int expected) {
  std::vector<std::string> env_strings;
  for (char** env = environ; *env != nullptr; ++env) {
    const std::string entry(*env);
    if (entry.rfind("LATHE_NUM_THREADS=", 0) == 0) continue;
    if (entry.rfind("LATHE_RUNTIME_TEST_EXPECT_THREADS=", 0) == 0) continue;
    env_strings.push_back(entry);
  }
  if (!num_threads.empty()) env_strings.push_back("LATHE_NUM_THREADS=" + num_threads);
  env_strings.push_back("LATHE_RUNTIME_TEST_EXPECT_THREADS=" + std::to_string(expected));
  std::vector<char*> envp;
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=ParallelForChild.PoolSize";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  std::fflush(stdout);  // the child shares stdout; keep the outputs in order
  pid_t pid = 0;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int AffinityCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof(set), &set);
  return CPU_COUNT(&set);
}

TEST(ParallelForTest, NumThreadsEnvironment) {
  EXPECT_EQ(RunChild("1", 1), 0);
  EXPECT_EQ(RunChild("3", 3), 0);
  EXPECT_EQ(RunChild("5", 5), 0);
  // Invalid values fall back to the affinity mask.
  EXPECT_EQ(RunChild("zero", AffinityCount()), 0);
  EXPECT_EQ(RunChild("0", AffinityCount()), 0);
  EXPECT_EQ(RunChild("", AffinityCount()), 0);
}

}  // namespace
