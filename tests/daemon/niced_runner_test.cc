// NicedRunner: closures run on a thread of their own at the nice value asked for (inline at
// nice 0), one after another on the same thread, and the caller waits for each.
#include "daemon/niced_runner.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace lathe::daemon {
namespace {

pid_t ThreadId() { return static_cast<pid_t>(syscall(SYS_gettid)); }

int NiceOfThisThread() {
  errno = 0;
  return getpriority(PRIO_PROCESS, static_cast<id_t>(ThreadId()));
}

TEST(NicedRunnerTest, RunsOnANicedThreadAndWaits) {
  const int base = NiceOfThisThread();
  if (base >= 5) GTEST_SKIP() << "this test runs at nice " << base << " already";
  const pid_t caller = ThreadId();
  NicedRunner runner(5);
  pid_t first = 0, second = 0;
  int nice = -100;
  runner.Run([&] {
    first = ThreadId();
    nice = NiceOfThisThread();
  });
  // Run returned only after the closure did: its writes are visible here.
  EXPECT_NE(first, 0);
  EXPECT_NE(first, caller);
  EXPECT_EQ(nice, 5);
  runner.Run([&] { second = ThreadId(); });
  EXPECT_EQ(second, first) << "one thread for every closure";
  EXPECT_EQ(NiceOfThisThread(), base) << "the caller's priority changed";
}

TEST(NicedRunnerTest, NiceZeroRunsInline) {
  NicedRunner runner(0);
  pid_t ran_on = 0;
  runner.Run([&] { ran_on = ThreadId(); });
  EXPECT_EQ(ran_on, ThreadId());
}

}  // namespace
}  // namespace lathe::daemon
