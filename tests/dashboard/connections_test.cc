// The dashboard's connections (dashboard/connections.h) against slow and greedy clients, on a
// real DashboardServer over a real TunerService and database: one client address cannot hold
// more than its share of connections, a request that dribbles in is cut off at its deadline,
// and other clients are served meanwhile. Clients of another address come from 127.0.0.2
// (the whole of 127.0.0.0/8 is this machine).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "dashboard/server.h"
#include "tests/daemon/service_fixture.h"

namespace lathe::daemon::service_testing {
namespace {

using Clock = std::chrono::steady_clock;

// A connection to 127.0.0.1:`port` from `from` (a loopback address); -1 on failure.
int Connect(int port, const char* from) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, from, &local.sin_addr);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void Send(int fd, const std::string& s) { (void)!write(fd, s.data(), s.size()); }

// What the server sends until it closes the connection or `ms` pass; `closed` tells which.
std::string ReadUntilClosed(int fd, int ms, bool* closed) {
  std::string out;
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  *closed = false;
  while (Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) {
      *closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class DashboardConnectionsTest : public ServiceTest {};

TEST_F(DashboardConnectionsTest, SlowAndGreedyClientsCannotStarveOthers) {
  StartServer(Options());
  dashboard::ServerOptions o;
  o.data.db_path = db_path_;
  o.threads = 4;
  o.connections_per_client = 2;
  o.request_timeout_ms = 600;
  o.idle_timeout_ms = 300;
  auto d = dashboard::DashboardServer::Start(service_.get(), o);
  ASSERT_TRUE(d.ok()) << d.status();
  const int port = (*d)->port();
  const std::string get = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n";

  // 127.0.0.2 opens two connections that send half a request, then more.
  std::vector<int> slow;
  for (int i = 0; i < 2; ++i) {
    const int fd = Connect(port, "127.0.0.2");
    ASSERT_GE(fd, 0) << "cannot connect from 127.0.0.2";
    Send(fd, get);  // no blank line: the headers never end
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int greedy = Connect(port, "127.0.0.2");
  ASSERT_GE(greedy, 0);
  bool closed = false;
  std::string refused = ReadUntilClosed(greedy, 2000, &closed);
  EXPECT_TRUE(closed);
  EXPECT_NE(refused.find(" 503 "), std::string::npos) << refused;
  close(greedy);

  // Meanwhile another client is served at once.
  const int other = Connect(port, "127.0.0.1");
  ASSERT_GE(other, 0);
  Send(other, get + "Connection: close\r\n\r\n");
  const auto start = Clock::now();
  std::string answer = ReadUntilClosed(other, 2000, &closed);
  EXPECT_NE(answer.find(" 200 "), std::string::npos) << answer;
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(500));
  close(other);

  // The slow ones are cut off at their deadline, dribbling or not.
  for (int fd : slow) {
    Send(fd, "X-Dribble: 1\r\n");
    std::string rest = ReadUntilClosed(fd, 3000, &closed);
    EXPECT_TRUE(closed) << "a request that never ended kept its connection: " << rest;
    close(fd);
  }
  // Its place is free again.
  const int again = Connect(port, "127.0.0.2");
  ASSERT_GE(again, 0);
  Send(again, get + "Connection: close\r\n\r\n");
  answer = ReadUntilClosed(again, 2000, &closed);
  EXPECT_NE(answer.find(" 200 "), std::string::npos) << answer;
  close(again);
  (*d)->Stop();
}

TEST_F(DashboardConnectionsTest, KeptAliveConnectionsServeManyRequestsThenIdleOut) {
  StartServer(Options());
  dashboard::ServerOptions o;
  o.data.db_path = db_path_;
  o.idle_timeout_ms = 300;
  auto d = dashboard::DashboardServer::Start(service_.get(), o);
  ASSERT_TRUE(d.ok()) << d.status();
  const int fd = Connect((*d)->port(), "127.0.0.1");
  ASSERT_GE(fd, 0);
  Send(fd,
       "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /api/state HTTP/1.1\r\n"
       "Host: localhost\r\n\r\n");
  bool closed = false;
  const std::string both = ReadUntilClosed(fd, 3000, &closed);
  EXPECT_TRUE(closed) << "an idle kept-alive connection stayed open";
  size_t oks = 0;
  for (size_t at = both.find("HTTP/1.1 200"); at != std::string::npos;
       at = both.find("HTTP/1.1 200", at + 1)) {
    ++oks;
  }
  EXPECT_EQ(oks, 2u) << both;
  close(fd);
}

}  // namespace
}  // namespace lathe::daemon::service_testing
