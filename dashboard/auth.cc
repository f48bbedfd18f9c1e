#include "dashboard/auth.h"

#include <openssl/rand.h>

#include <algorithm>
#include <random>

namespace lathe::dashboard {

namespace {

// 32 random bytes as 64 hex digits: OpenSSL's CSPRNG, std::random_device if that fails.
std::string NewSessionId() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    std::random_device rd;
    for (unsigned char& b : bytes) b = static_cast<unsigned char>(rd());
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  id.reserve(2 * sizeof bytes);
  for (unsigned char b : bytes) {
    id.push_back(kHex[b >> 4]);
    id.push_back(kHex[b & 15]);
  }
  return id;
}

}  // namespace

Authenticator::Authenticator(std::string token) : token_(std::move(token)) {}

bool Authenticator::ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string_view Authenticator::CookieValue(std::string_view cookie, std::string_view name) {
  auto strip = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  };
  while (!cookie.empty()) {
    const size_t semi = cookie.find(';');
    std::string_view part = strip(cookie.substr(0, semi));
    cookie = semi == std::string_view::npos ? std::string_view() : cookie.substr(semi + 1);
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos) continue;
    if (strip(part.substr(0, eq)) == name) return strip(part.substr(eq + 1));
  }
  return {};
}

Authenticator::Result Authenticator::Check(std::string_view authorization,
                                           std::string_view cookie) {
  if (open()) return Result::kOk;
  bool offered = false;
  if (!authorization.empty()) {
    offered = true;
    constexpr std::string_view kBearer = "Bearer ";
    if (authorization.substr(0, kBearer.size()) == kBearer &&
        ConstantTimeEquals(authorization.substr(kBearer.size()), token_)) {
      return Result::kOk;
    }
  }
  const std::string_view session = CookieValue(cookie, kSessionCookie);
  if (!session.empty()) {
    offered = true;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(session);
    if (it != sessions_.end()) {
      if (Clock::now() < it->second) return Result::kOk;
      sessions_.erase(it);
    }
  }
  return offered ? Result::kInvalid : Result::kMissing;
}

std::optional<std::string> Authenticator::Login(std::string_view token) {
  if (open() || !ConstantTimeEquals(token, token_)) return std::nullopt;
  std::string id = NewSessionId();
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = it->second <= now ? sessions_.erase(it) : std::next(it);
  }
  if (sessions_.size() >= kMaxSessions) {
    auto oldest =
        std::min_element(sessions_.begin(), sessions_.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    sessions_.erase(oldest);
  }
  sessions_.emplace(id, now + kSessionTtl);
  return id;
}

int64_t LoginThrottle::WaitSeconds(const std::string& client, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = clients_.find(client);
  if (it == clients_.end() || it->second.failures < kFreeFailures) return 0;
  const int doublings = std::min(it->second.failures - kFreeFailures, 16);
  const Clock::duration backoff =
      std::min<Clock::duration>(std::chrono::seconds(int64_t{1} << doublings), kMaxBackoff);
  const Clock::duration left = it->second.last + backoff - now;
  if (left <= Clock::duration::zero()) return 0;
  return std::chrono::ceil<std::chrono::seconds>(left).count();
}

void LoginThrottle::Failed(const std::string& client, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (clients_.size() >= kMaxClients && clients_.count(client) == 0) {
    auto stalest = std::min_element(
        clients_.begin(), clients_.end(),
        [](const auto& a, const auto& b) { return a.second.last < b.second.last; });
    clients_.erase(stalest);
  }
  Entry& e = clients_[client];
  ++e.failures;
  e.last = now;
}

void LoginThrottle::Succeeded(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  clients_.erase(client);
}

void Authenticator::Logout(std::string_view cookie) {
  const std::string_view session = CookieValue(cookie, kSessionCookie);
  if (session.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(session);
  if (it != sessions_.end()) sessions_.erase(it);
}

}  // namespace lathe::dashboard
