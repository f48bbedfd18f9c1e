// The default schedule of every operator of CONTRACT.md builds and agrees with the reference,
// including odd shapes, epilogues, strides, dilation and groups; hand-written schedules too.
#include <gtest/gtest.h>

#include "ir/printer.h"
#include "op_specs.h"
#include "test_util.h"

namespace lathe {
namespace {

class DefaultScheduleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DefaultScheduleTest, AgreesWithReference) {
  auto w = ir::MakeWorkload(GetParam());
  ASSERT_TRUE(w.ok()) << w.status();
  ir::Schedule sch(*w);
  absl::Status st = testing::BuildAndCheck(sch);
  if (!st.ok()) {
    auto f = codegen::Lower(sch, "kernel");
    ASSERT_TRUE(st.ok()) << st << "\n" << (f.ok() ? ir::ToText(*f) : f.status().ToString());
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, DefaultScheduleTest, ::testing::ValuesIn(testing::OpTestSpecs()));
INSTANTIATE_TEST_SUITE_P(ModelOps, DefaultScheduleTest,
                         ::testing::ValuesIn(testing::ModelOpTestSpecs()));

}  // namespace
}  // namespace lathe
