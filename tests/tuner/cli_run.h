// \file
// Running the `lathe` binary (LATHE_BIN) from the tuner tests as a user runs it: the CLI tests'
// one runner (tests/tools/run_lathe.h) under the tuner tests' names.
#ifndef LATHE_TESTS_TUNER_CLI_RUN_H_
#define LATHE_TESTS_TUNER_CLI_RUN_H_

#include <string>

#include "tests/tools/run_lathe.h"

namespace lathe::tuner {

using CliRun = ::lathe::testing::CliResult;

// Runs `lathe ARGS`; stdout only, or stdout and stderr together.
inline CliRun Lathe(const std::string& args, bool with_stderr) {
  return ::lathe::testing::Lathe(args, "", with_stderr);
}

}  // namespace lathe::tuner

#endif  // LATHE_TESTS_TUNER_CLI_RUN_H_
