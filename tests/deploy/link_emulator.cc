// lathe-test-link: a point-to-point network link between two network namespaces, emulated
// in user space for the fleet test (tests/deploy/fleet_test.cc) on kernels built without the
// netem queueing discipline (CONFIG_NET_SCH_NETEM), which is what `tc netem` needs.
//
//   lathe-test-link --delay-ms D --loss P [--seed S] NETNS_A IFNAME_A NETNS_B IFNAME_B
//
// Creates a layer-3 TUN device IFNAME_A in the namespace /run/netns/NETNS_A and IFNAME_B in
// NETNS_B, prints "ready" on stdout once both exist (the caller then gives them addresses and
// brings them up with `ip`), and carries every IP packet written to one device out of the
// other after D milliseconds, each direction on its own, dropping each packet with
// probability P (0..1). Packets keep their order, as on a wire with a constant delay.
// SIGUSR1 takes the link down (every packet is dropped, as when a cable is pulled or a route
// black-holes), SIGUSR2 brings it back; SIGTERM/SIGINT end it and the devices vanish with it.
// Prints "down" / "up" on stdout when it changes state, and its counters on exit.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_down = 0;
volatile sig_atomic_t g_stop = 0;

void OnSignal(int sig) {
  if (sig == SIGUSR1) g_down = 1;
  if (sig == SIGUSR2) g_down = 0;
  if (sig == SIGTERM || sig == SIGINT) g_stop = 1;
}

// Opens a TUN device named `ifname` inside the namespace /run/netns/`netns`. The device lives
// in the namespace the file descriptor was created in, whatever this process's namespace is
// afterwards. -1 (with a message) on failure.
int OpenTunIn(const std::string& netns, const std::string& ifname) {
  const int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  const std::string path = "/run/netns/" + netns;
  const int target = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (self < 0 || target < 0) {
    std::fprintf(stderr, "lathe-test-link: cannot open %s: %s\n", path.c_str(), strerror(errno));
    return -1;
  }
  if (setns(target, CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "lathe-test-link: setns %s: %s\n", path.c_str(), strerror(errno));
    return -1;
  }
  int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd >= 0) {
    ifreq ifr{};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname.c_str());
    if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
      std::fprintf(stderr, "lathe-test-link: TUNSETIFF %s: %s\n", ifname.c_str(), strerror(errno));
      close(fd);
      fd = -1;
    }
  } else {
    std::fprintf(stderr, "lathe-test-link: /dev/net/tun: %s\n", strerror(errno));
  }
  const int back = setns(self, CLONE_NEWNET);
  close(self);
  close(target);
  if (back != 0) {
    std::fprintf(stderr, "lathe-test-link: cannot return to the first namespace\n");
    std::exit(1);
  }
  return fd;
}

struct Packet {
  Clock::time_point due;
  std::vector<char> bytes;
};

// One direction of the link: packets read from `in` leave through `out` after the delay.
struct Direction {
  int in = -1;
  int out = -1;
  std::deque<Packet> queue;
  long carried = 0, lost = 0, dropped_down = 0;
};

}  // namespace

int main(int argc, char** argv) {
  double delay_ms = 0, loss = 0;
  unsigned seed = 1;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--delay-ms" || a == "--loss" || a == "--seed") && i + 1 < argc) {
      const char* v = argv[++i];
      if (a == "--delay-ms") delay_ms = std::atof(v);
      if (a == "--loss") loss = std::atof(v);
      if (a == "--seed") seed = static_cast<unsigned>(std::atol(v));
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() != 4 || delay_ms < 0 || loss < 0 || loss > 1) {
    std::fprintf(stderr,
                 "usage: lathe-test-link --delay-ms D --loss P [--seed S] NETNS_A IFNAME_A "
                 "NETNS_B IFNAME_B (D >= 0, 0 <= P <= 1)\n");
    return 2;
  }
  const int a = OpenTunIn(pos[0], pos[1]);
  const int b = OpenTunIn(pos[2], pos[3]);
  if (a < 0 || b < 0) return 1;

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT}) sigaction(sig, &sa, nullptr);
  std::printf("ready\n");
  std::fflush(stdout);

  const auto delay = std::chrono::microseconds(static_cast<int64_t>(delay_ms * 1000));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(0, 1);
  Direction dirs[2];
  dirs[0].in = a;
  dirs[0].out = b;
  dirs[1].in = b;
  dirs[1].out = a;
  int was_down = 0;
  std::vector<char> buf(65536);
  while (!g_stop) {
    if (g_down != was_down) {
      was_down = g_down;
      std::printf(was_down ? "down\n" : "up\n");
      std::fflush(stdout);
      // Packets on the wire when it went down are lost with it.
      if (was_down) {
        for (Direction& d : dirs) {
          d.dropped_down += static_cast<long>(d.queue.size());
          d.queue.clear();
        }
      }
    }
    // Deliver what is due; wait for the next due packet or for input.
    const Clock::time_point now = Clock::now();
    int timeout_ms = 100;
    for (Direction& d : dirs) {
      while (!d.queue.empty() && d.queue.front().due <= now) {
        const Packet& p = d.queue.front();
        // A full device queue drops the packet, as a congested wire would.
        if (write(d.out, p.bytes.data(), p.bytes.size()) >= 0) ++d.carried;
        d.queue.pop_front();
      }
      if (!d.queue.empty()) {
        const auto wait =
            std::chrono::duration_cast<std::chrono::milliseconds>(d.queue.front().due - now)
                .count() +
            1;
        timeout_ms = std::min<int>(timeout_ms, static_cast<int>(wait));
      }
    }
    pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    if (poll(fds, 2, timeout_ms) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      Direction& d = dirs[i];
      for (;;) {
        const ssize_t n = read(d.in, buf.data(), buf.size());
        if (n <= 0) break;
        if (g_down) {
          ++d.dropped_down;
          continue;
        }
        if (loss > 0 && uniform(rng) < loss) {
          ++d.lost;
          continue;
        }
        d.queue.push_back({Clock::now() + delay, std::vector<char>(buf.begin(), buf.begin() + n)});
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    std::printf("%s->%s carried=%ld lost=%ld dropped_while_down=%ld\n", pos[i * 2 + 1].c_str(),
                pos[(1 - i) * 2 + 1].c_str(), dirs[i].carried, dirs[i].lost, dirs[i].dropped_down);
  }
  return 0;
}
