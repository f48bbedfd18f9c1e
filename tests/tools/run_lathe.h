// Runs the lathe binary (LATHE_BIN) as a user runs it, for the CLI tests of tools/ and tuner/:
// exit status and what it printed (stdout and stderr together, or stdout alone).
#ifndef LATHE_TESTS_TOOLS_RUN_LATHE_H_
#define LATHE_TESTS_TOOLS_RUN_LATHE_H_

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace lathe::testing {

struct CliResult {
  int code = -1;
  std::string out;
};

// Runs `env lathe args` (`args` and `env` shell-quoted; `env` like "NAME=value", may be empty);
// stderr goes with stdout unless `with_stderr` is false (then it is dropped).
inline CliResult Lathe(const std::string& args, const std::string& env = "",
                       bool with_stderr = true) {
  std::string cmd = env + (env.empty() ? "" : " ") + std::string(LATHE_BIN) + " " + args +
                    (with_stderr ? " 2>&1" : " 2>/dev/null");
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace lathe::testing

#endif  // LATHE_TESTS_TOOLS_RUN_LATHE_H_
