// The rate and time-left estimate of a job on the dashboard.
#include "dashboard/job_rates.h"

#include <gtest/gtest.h>

namespace lathe::dashboard {
namespace {

TEST(JobRatesTest, NoRateBeforeAFewSecondsOfHistory) {
  JobRates r;
  r.Observe("j", 1000000, 0);
  r.Observe("j", 1002000, 10);
  EXPECT_FALSE(r.Rate("j", 1002000).has_value());
  EXPECT_FALSE(r.Rate("other", 1002000).has_value());
}

TEST(JobRatesTest, RateOverTheWindowAndTimeLeft) {
  JobRates r;
  for (int s = 0; s <= 20; ++s) r.Observe("j", 1000000 + s * 1000, 2 * s);  // 2 trials/s
  std::optional<double> rate = r.Rate("j", 1020000);
  ASSERT_TRUE(rate.has_value());
  EXPECT_NEAR(*rate, 2.0, 1e-9);
  std::optional<double> left = SecondsLeft(100, rate);
  ASSERT_TRUE(left.has_value());
  EXPECT_NEAR(*left, 50.0, 1e-9);
  // No progress for a while: the rate falls as the window slides.
  EXPECT_NEAR(*r.Rate("j", 1040000), 1.0, 1e-9);  // 40 trials in 40 s
  EXPECT_EQ(SecondsLeft(0, std::nullopt), 0.0);
  EXPECT_FALSE(SecondsLeft(5, std::nullopt).has_value());
  EXPECT_FALSE(SecondsLeft(5, 0.0).has_value());
}

TEST(JobRatesTest, OldSamplesLeaveTheWindow) {
  JobRates r;
  r.Observe("j", 0, 0);
  r.Observe("j", 1000, 1000);  // a burst long ago
  for (int64_t t = 600000; t <= 900000; t += 10000) r.Observe("j", t, 1000 + (t - 600000) / 1000);
  std::optional<double> rate = r.Rate("j", 900000);
  ASSERT_TRUE(rate.has_value());
  EXPECT_NEAR(*rate, 1.0, 0.05);  // 1 trial/s lately; the burst is forgotten
  r.Retain({});
  EXPECT_FALSE(r.Rate("j", 900000).has_value());
}

}  // namespace
}  // namespace lathe::dashboard
