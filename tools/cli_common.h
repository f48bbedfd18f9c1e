// \file
// What every `lathe` subcommand shares: exit codes (CONTRACT.md), error printing, the guard
// that turns an escaped exception into an error line and exit status 1, and a scoped SIGINT
// handler.
#ifndef LATHE_TOOLS_CLI_COMMON_H_
#define LATHE_TOOLS_CLI_COMMON_H_

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
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

// An exception's text on one line (a what() may hold newlines; stderr gets one line per error).
inline std::string OneLine(const char* what) {
  std::string s = what == nullptr ? "" : what;
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s.empty() ? "unknown error" : s;
}

// The text of the exception being handled (inside a catch block or a terminate handler).
inline std::string CurrentExceptionText() {
  std::exception_ptr e = std::current_exception();
  if (!e) return "terminate called without an active exception";
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc&) {
    return "out of memory";
  } catch (const std::exception& x) {
    return OneLine(x.what());
  } catch (...) {
    return "an exception of unknown type";
  }
}

// Runs `body` (a command) and returns its exit status. Library code returns statuses, but a
// dependency may still throw (std::bad_alloc, std::length_error, a third-party exception, or
// anything else): such an escaped exception becomes one line on stderr, "PROG: internal error:
// TEXT", and exit status 1 instead of an abort.
template <typename F>
int RunGuarded(const char* prog, F&& body) {
  try {
    return body();
  } catch (...) {
    std::fprintf(stderr, "%s: internal error: %s\n", prog, CurrentExceptionText().c_str());
    return kExitFailure;
  }
}

// Makes std::terminate (an exception escaping a thread, a destructor or a noexcept function,
// where RunGuarded cannot catch it) print "PROG: fatal error: TEXT" and exit with status 1
// instead of aborting. `prog` must outlive the process (a string literal).
inline void InstallTerminateHandler(const char* prog) {
  static const char* name = prog;
  std::set_terminate([] {
    std::fprintf(stderr, "%s: fatal error: %s\n", name, CurrentExceptionText().c_str());
    std::fflush(stderr);
    std::_Exit(kExitFailure);
  });
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
