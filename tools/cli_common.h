// \file
// What every `lathe` subcommand shares: exit codes (CONTRACT.md), error printing, and a
// scoped SIGINT handler.
#ifndef LATHE_TOOLS_CLI_COMMON_H_
#define LATHE_TOOLS_CLI_COMMON_H_

#include <signal.h>

#include <cstdio>
#include <string>

namespace lathe::tools {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoRecord = 3;

// Prints "CMD: MSG" on stderr and returns `code`.
inline int Fail(const std::string& cmd, const std::string& msg, int code = kExitFailure) {
  std::fprintf(stderr, "%s: %s\n", cmd.c_str(), msg.c_str());
  return code;
}

// Installs `handler` for SIGINT for the lifetime of the object, then restores the previous
// handler. Interrupted system calls restart.
class SigintScope {
 public:
  explicit SigintScope(void (*handler)(int)) {
    struct sigaction sa = {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    installed_ = sigaction(SIGINT, &sa, &old_) == 0;
  }
  ~SigintScope() {
    if (installed_) sigaction(SIGINT, &old_, nullptr);
  }
  SigintScope(const SigintScope&) = delete;
  SigintScope& operator=(const SigintScope&) = delete;

 private:
  struct sigaction old_ = {};
  bool installed_ = false;
};

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_CLI_COMMON_H_
