// A test's plan of measurement faults, outside the measurement protocol: a file of lines
// "CANDIDATE_ID FAULT" that a measurement child started with Env() in its environment reads
// for each candidate (measure/measure_child.h, TestFaultOf). Faults may be added while the
// child runs.
#ifndef LATHE_TESTS_MEASURE_FAULT_PLAN_H_
#define LATHE_TESTS_MEASURE_FAULT_PLAN_H_

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace lathe::test_support {

class FaultPlan {
 public:
  FaultPlan() {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/lathe-faults-XXXXXX";
    int fd = mkstemp(pattern.data());
    if (fd >= 0) close(fd);
    path_ = pattern;
  }
  ~FaultPlan() { std::remove(path_.c_str()); }
  FaultPlan(const FaultPlan&) = delete;
  FaultPlan& operator=(const FaultPlan&) = delete;

  // "LATHE_TEST_FAULTS=<path>", for a child's or worker's environment.
  std::string Env() const { return "LATHE_TEST_FAULTS=" + path_; }
  const std::string& path() const { return path_; }

  // Plans `fault` for the candidate `id` (no whitespace in either); nothing for an empty fault.
  void Add(const std::string& id, const std::string& fault) {
    if (fault.empty()) return;
    std::ofstream out(path_, std::ios::app);
    out << id << ' ' << fault << '\n';
  }

 private:
  std::string path_;
};

// One plan per test process (ctest runs each test in its own).
inline FaultPlan& ProcessFaultPlan() {
  static FaultPlan plan;
  return plan;
}

}  // namespace lathe::test_support

#endif  // LATHE_TESTS_MEASURE_FAULT_PLAN_H_
