// \file
// Running the `lathe` binary (LATHE_BIN) from the tuner tests as a user runs it.
#ifndef LATHE_TESTS_TUNER_CLI_RUN_H_
#define LATHE_TESTS_TUNER_CLI_RUN_H_

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace lathe::tuner {

struct CliRun {
  int code = -1;  // exit status (-1: it did not exit)
  std::string out;
};

// Runs `lathe ARGS`; stdout only, or stdout and stderr together.
inline CliRun Lathe(const std::string& args, bool with_stderr) {
  std::string cmd = std::string(LATHE_BIN) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace lathe::tuner

#endif  // LATHE_TESTS_TUNER_CLI_RUN_H_
