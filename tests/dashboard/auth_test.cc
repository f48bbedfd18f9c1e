// Who may see the dashboard: bearer tokens, sessions from /login, cookies.
#include "dashboard/auth.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>

namespace lathe::dashboard {
namespace {

using Result = Authenticator::Result;

TEST(AuthTest, WithoutATokenEverythingIsOpen) {
  Authenticator a("");
  EXPECT_TRUE(a.open());
  EXPECT_EQ(a.Check("", ""), Result::kOk);
  EXPECT_FALSE(a.Login("anything").has_value());
}

TEST(AuthTest, BearerTokenMustMatchExactly) {
  Authenticator a("s3cret");
  EXPECT_EQ(a.Check("", ""), Result::kMissing);
  EXPECT_EQ(a.Check("Bearer s3cret", ""), Result::kOk);
  EXPECT_EQ(a.Check("Bearer s3cre", ""), Result::kInvalid);
  EXPECT_EQ(a.Check("Bearer s3cret ", ""), Result::kInvalid);
  EXPECT_EQ(a.Check("Basic s3cret", ""), Result::kInvalid);
  EXPECT_EQ(a.Check("s3cret", ""), Result::kInvalid);
}

TEST(AuthTest, LoginHandsOutSessionsThatLogoutEnds) {
  Authenticator a("s3cret");
  EXPECT_FALSE(a.Login("wrong").has_value());
  EXPECT_FALSE(a.Login("").has_value());
  std::optional<std::string> s = a.Login("s3cret");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->size(), 64u);
  EXPECT_EQ(s->find("s3cret"), std::string::npos);
  const std::string cookie = "theme=dark; " + std::string(kSessionCookie) + "=" + *s + "; x=1";
  EXPECT_EQ(a.Check("", cookie), Result::kOk);
  EXPECT_EQ(a.Check("", std::string(kSessionCookie) + "=0000"), Result::kInvalid);
  // A second session is another id; ending one leaves the other.
  std::optional<std::string> s2 = a.Login("s3cret");
  ASSERT_TRUE(s2.has_value());
  EXPECT_NE(*s, *s2);
  a.Logout(cookie);
  EXPECT_EQ(a.Check("", cookie), Result::kInvalid);
  EXPECT_EQ(a.Check("", std::string(kSessionCookie) + "=" + *s2), Result::kOk);
}

TEST(AuthTest, SessionsAreBoundedOldestDroppedFirst) {
  Authenticator a("s3cret");
  std::optional<std::string> first = a.Login("s3cret");
  ASSERT_TRUE(first.has_value());
  std::set<std::string> ids;
  for (size_t i = 0; i < Authenticator::kMaxSessions; ++i) ids.insert(*a.Login("s3cret"));
  EXPECT_EQ(ids.size(), Authenticator::kMaxSessions);
  EXPECT_EQ(a.Check("", std::string(kSessionCookie) + "=" + *first), Result::kInvalid);
  EXPECT_EQ(a.Check("", std::string(kSessionCookie) + "=" + *ids.begin()), Result::kOk);
}

TEST(AuthTest, CookieValueFindsTheNamedCookie) {
  EXPECT_EQ(Authenticator::CookieValue("a=1; lathe_session=xyz; b=2", "lathe_session"), "xyz");
  EXPECT_EQ(Authenticator::CookieValue("lathe_session=xyz", "lathe_session"), "xyz");
  EXPECT_EQ(Authenticator::CookieValue("xlathe_session=1", "lathe_session"), "");
  EXPECT_EQ(Authenticator::CookieValue("", "lathe_session"), "");
  EXPECT_EQ(Authenticator::CookieValue(";;=;lathe_session", "lathe_session"), "");
}

TEST(LoginThrottleTest, WrongLoginsBackOffPerClientAndARightOneClears) {
  LoginThrottle t;
  const auto t0 = LoginThrottle::Clock::now();
  for (int i = 0; i < LoginThrottle::kFreeFailures; ++i) {
    EXPECT_EQ(t.WaitSeconds("10.0.0.1", t0), 0) << i;
    t.Failed("10.0.0.1", t0);
  }
  // Past the free ones: 1 s, then 2 s, 4 s ... after the last wrong one.
  EXPECT_EQ(t.WaitSeconds("10.0.0.1", t0), 1);
  EXPECT_EQ(t.WaitSeconds("10.0.0.2", t0), 0);  // another client is not held back
  const auto t1 = t0 + std::chrono::seconds(1);
  EXPECT_EQ(t.WaitSeconds("10.0.0.1", t1), 0);
  t.Failed("10.0.0.1", t1);
  EXPECT_EQ(t.WaitSeconds("10.0.0.1", t1), 2);
  auto tn = t1;
  for (int i = 0; i < 20; ++i) t.Failed("10.0.0.1", tn);
  EXPECT_EQ(t.WaitSeconds("10.0.0.1", tn), LoginThrottle::kMaxBackoff.count());
  t.Succeeded("10.0.0.1");
  EXPECT_EQ(t.WaitSeconds("10.0.0.1", tn), 0);
}

}  // namespace
}  // namespace lathe::dashboard
