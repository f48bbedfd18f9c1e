// Shared helpers of the codegen tests: build a schedule, run it, compare with the reference.
#ifndef LATHE_TESTS_CODEGEN_TEST_UTIL_H_
#define LATHE_TESTS_CODEGEN_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codegen/cpu_kernel.h"
#include "codegen/lower.h"
#include "ir/check.h"
#include "ir/reference.h"
#include "ir/schedule.h"

namespace lathe::testing {

// The workload of `spec`; a malformed spec fails the test that asked.
inline ir::Workload W(const std::string& spec) {
  auto w = ir::MakeWorkload(spec);
  EXPECT_TRUE(w.ok()) << spec << ": " << w.status();
  return *w;
}

// How many times `what` occurs in `text` (a lowered program's or LLVM IR's text).
inline size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// Lowers, JIT-compiles and runs `sch` on seeded random inputs and checks the output against
// the naive reference. Returns the first failure.
inline absl::Status BuildAndCheck(const ir::Schedule& sch, uint64_t seed = 1) {
  const ir::Workload& w = sch.workload();
  auto f = codegen::Lower(sch, "kernel");
  if (!f.ok()) return f.status();
  auto k = codegen::JitCompile(*f);
  if (!k.ok()) return k.status();
  std::vector<std::vector<float>> args = ir::AllocateArgs(w);
  ir::FillRandomInputs(args, seed);
  std::vector<std::vector<float>> ref = args;
  if (auto st = ir::ComputeReference(w, ref); !st.ok()) return st;
  std::fill(args.back().begin(), args.back().end(), 12345.0f);  // catch unwritten elements
  std::vector<void*> ptrs;
  for (auto& a : args) ptrs.push_back(a.data());
  int rc = (*k)->Run(ptrs.data(), static_cast<int>(ptrs.size()));
  if (rc != 0) return absl::InternalError("kernel returned " + std::to_string(rc));
  return ir::CheckOutput(args.back(), ref.back(), w.output()->shape);
}

}  // namespace lathe::testing

#endif  // LATHE_TESTS_CODEGEN_TEST_UTIL_H_
