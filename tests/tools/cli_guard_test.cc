// The guard of `lathe`'s entry point (tools/cli_common.h): an exception that escapes a command
// is one error line and exit status 1, never an abort.
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "tools/cli_common.h"

namespace lathe::tools {
namespace {

struct Guarded {
  int code;
  std::string err;
};

template <typename F>
Guarded RunCommand(F f) {
  ::testing::internal::CaptureStderr();
  int code = RunGuarded("lathe", f);
  return {code, ::testing::internal::GetCapturedStderr()};
}

TEST(CliGuardTest, EscapedExceptionsBecomeOneLineAndExitStatusOne) {
  Guarded ok = RunCommand([] { return 3; });
  EXPECT_EQ(ok.code, 3);
  EXPECT_EQ(ok.err, "");
  Guarded std_error =
      RunCommand([]() -> int { throw std::runtime_error("bad thing\nsecond line"); });
  EXPECT_EQ(std_error.code, 1);
  EXPECT_EQ(std_error.err, "lathe: internal error: bad thing second line\n");
  Guarded oom = RunCommand([]() -> int { throw std::bad_alloc(); });
  EXPECT_EQ(oom.code, 1);
  EXPECT_EQ(oom.err, "lathe: internal error: out of memory\n");
  Guarded other = RunCommand([]() -> int { throw 42; });
  EXPECT_EQ(other.code, 1);
  EXPECT_EQ(other.err, "lathe: internal error: an exception of unknown type\n");
}

TEST(CliGuardDeathTest, AnExceptionEscapingAThreadExitsWithStatusOne) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        InstallTerminateHandler("lathe");
        std::thread t([] { throw std::length_error("vector too long"); });
        t.join();
      },
      ::testing::ExitedWithCode(1), "lathe: fatal error: vector too long");
}

}  // namespace
}  // namespace lathe::tools
