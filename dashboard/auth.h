// \file
// Who may see lathed's dashboard. With a shared token (lathed --token-file) every page and
// data endpoint needs either the header "Authorization: Bearer <token>" (scripts, tests) or
// a session cookie that POST /login hands out in exchange for the token (browsers: the token
// is typed once into a login form and never stored in the browser or sent again). Without a
// token everything is open, like the gRPC side.
//
// Sessions are random 256-bit ids kept in memory (a restarted daemon forgets them: log in
// again), valid for kSessionTtl after login, at most kMaxSessions at once (the oldest is
// dropped). Tokens are compared in constant time. Nothing here logs; callers must never log
// a token or a session id.
//
// Thread-safety: every method may be called from any thread.
#ifndef LATHE_DASHBOARD_AUTH_H_
#define LATHE_DASHBOARD_AUTH_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace lathe::dashboard {

// The cookie that carries a session id.
inline constexpr char kSessionCookie[] = "lathe_session";

class Authenticator {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::hours kSessionTtl{12};
  static constexpr size_t kMaxSessions = 1024;

  // `token` empty: no authentication.
  explicit Authenticator(std::string token);

  bool open() const { return token_.empty(); }

  enum class Result { kOk, kMissing, kInvalid };
  // Checks a request's "Authorization" and "Cookie" header values (either may be empty): a
  // matching bearer token or a live session passes. kMissing when neither was offered,
  // kInvalid when what was offered does not match.
  Result Check(std::string_view authorization, std::string_view cookie);

  // A new session id when `token` is the shared secret, else nullopt.
  std::optional<std::string> Login(std::string_view token);
  // Ends the session named by the "Cookie" header value, if any.
  void Logout(std::string_view cookie);

  // The value of cookie `name` in a "Cookie" header value, or empty.
  static std::string_view CookieValue(std::string_view cookie, std::string_view name);
  static bool ConstantTimeEquals(std::string_view a, std::string_view b);

 private:
  std::string token_;
  std::mutex mu_;
  std::map<std::string, Clock::time_point, std::less<>> sessions_;  // id -> expiry
};

// Wrong logins per client (its address): the first kFreeFailures cost nothing; after them,
// the client must wait 1 s, 2 s, 4 s ... (at most kMaxBackoff) after its last wrong login
// before it may try again, right token or not. A right login clears its count. At most
// kMaxClients clients are remembered (the one wrong longest ago is forgotten first). Times are
// passed in, so that tests need not sleep.
//
// Thread-safety: every method may be called from any thread.
class LoginThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kFreeFailures = 3;
  static constexpr std::chrono::seconds kMaxBackoff{60};
  static constexpr size_t kMaxClients = 4096;

  // Seconds (rounded up) `client` must still wait at `now`; 0 when it may try.
  int64_t WaitSeconds(const std::string& client, Clock::time_point now);
  void Failed(const std::string& client, Clock::time_point now);
  void Succeeded(const std::string& client);

 private:
  struct Entry {
    int failures = 0;
    Clock::time_point last;
  };
  std::mutex mu_;
  std::map<std::string, Entry> clients_;
};

}  // namespace lathe::dashboard

#endif  // LATHE_DASHBOARD_AUTH_H_
