// \file
// Hosts made of Linux network namespaces for the fleet test (tests/deploy/fleet_test.cc):
// namespaces created with iproute2, point-to-point links between them with a delay and a loss
// rate, a NAT router (nftables masquerade), and processes started inside a namespace with
// `ip netns exec`. Everything is removed by the destructor (the links' processes first, then
// the namespaces, which takes their interfaces with them).
//
// A link is `tc netem` on a veth pair where the kernel has the netem queueing discipline, and
// otherwise the user-space emulator tests/deploy/link_emulator.cc (two TUN devices, the same
// delay and loss); LATHE_FLEET_LINK=netem|user forces one. Either can be taken down (every
// packet dropped, as when a cable is pulled or a route black-holes) and brought back.
//
// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); SkipReason() says why it cannot run here.
#ifndef LATHE_TESTS_DEPLOY_NETNS_H_
#define LATHE_TESTS_DEPLOY_NETNS_H_

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/e2e/process.h"

namespace lathe::deploy {

using e2e::Process;
using e2e::RunCommand;

// Runs a shell command; false (with the command and its output in `*error`) when it fails.
inline bool Sh(const std::string& cmd, std::string* error = nullptr) {
  auto [rc, out] = RunCommand(cmd + " 2>&1");
  if (rc == 0) return true;
  if (error) *error = "`" + cmd + "` exited " + std::to_string(rc) + ": " + out;
  return false;
}

inline std::string Which(const std::string& tool) {
  auto [rc, out] = RunCommand("command -v " + tool + " 2>/dev/null");
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return rc == 0 ? out : "";
}

// Empty when namespaces, links and NAT can be made here; else why not.
inline std::string SkipReason() {
  if (geteuid() != 0) return "not root: network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN";
  for (const char* tool : {"ip", "nft", "openssl", "sysctl"}) {
    if (Which(tool).empty()) {
      return std::string("no `") + tool + "` (scripts/install-deps.sh installs it)";
    }
  }
  const std::string probe = "lft-probe-" + std::to_string(getpid());
  std::string error;
  if (!Sh("ip netns add " + probe, &error)) return "cannot create a network namespace: " + error;
  const bool nat = Sh("ip netns exec " + probe + " nft add table ip lathe_probe", &error);
  Sh("ip netns del " + probe);
  if (!nat) return "nftables does not work in a namespace: " + error;
  return "";
}

// True when the kernel has the netem queueing discipline (CONFIG_NET_SCH_NETEM).
inline bool HaveNetem() {
  const std::string ns = "lft-netem-" + std::to_string(getpid());
  if (!Sh("ip netns add " + ns)) return false;
  const bool ok = Sh("ip -n " + ns + " link add na type veth peer name nb") &&
                  Sh("tc -n " + ns + " qdisc add dev na root netem delay 1ms");
  Sh("ip netns del " + ns);
  return ok;
}

// A set of namespaces and the links between them; names are prefixed by the test's pid so
// that two runs never meet.
class Network {
 public:
  // `link_bin`: the user-space link emulator (lathe-test-link).
  explicit Network(std::string link_bin, std::string log_dir)
      : link_bin_(std::move(link_bin)), log_dir_(std::move(log_dir)) {
    prefix_ = "lft" + std::to_string(getpid()) + "-";
    const char* forced = std::getenv("LATHE_FLEET_LINK");
    if (forced != nullptr && std::string(forced) == "user") {
      netem_ = false;
    } else if (forced != nullptr && std::string(forced) == "netem") {
      netem_ = true;
    } else {
      netem_ = HaveNetem();
    }
  }
  ~Network() {
    for (auto& l : links_) {
      if (l.proc) {
        l.proc->Signal(SIGTERM);
        l.proc->Wait(5000);
      }
    }
    links_.clear();
    for (const std::string& ns : namespaces_) Sh("ip netns del " + ns);
  }

  bool netem() const { return netem_; }
  const char* link_kind() const {
    return netem_ ? "tc netem on veth pairs" : "user-space emulator (TUN devices; no netem here)";
  }

  // The full name of host `host`.
  std::string Ns(const std::string& host) const { return prefix_ + host; }

  bool AddHost(const std::string& host, std::string* error) {
    const std::string ns = Ns(host);
    if (!Sh("ip netns add " + ns, error)) return false;
    namespaces_.push_back(ns);
    return Sh("ip -n " + ns + " link set lo up", error);
  }

  // A link between `a` (interface `if_a`, address `ip_a`) and `b`, point to point, with
  // `delay_ms` each way and `loss` (0..1) each way. Returns the link's index.
  int AddLink(const std::string& a, const std::string& if_a, const std::string& ip_a,
              const std::string& b, const std::string& if_b, const std::string& ip_b, int delay_ms,
              double loss, std::string* error) {
    Link l{Ns(a), if_a, Ns(b), if_b, delay_ms, loss, nullptr};
    const std::string na = Ns(a), nb = Ns(b);
    if (netem_) {
      if (!Sh("ip link add " + if_a + "-" + std::to_string(links_.size()) + " netns " + na +
                  " type veth peer name " + if_b + "-" + std::to_string(links_.size()) + " netns " +
                  nb,
              error)) {
        return -1;
      }
      const std::string tmp_a = if_a + "-" + std::to_string(links_.size());
      const std::string tmp_b = if_b + "-" + std::to_string(links_.size());
      if (!Sh("ip -n " + na + " link set " + tmp_a + " name " + if_a, error) ||
          !Sh("ip -n " + nb + " link set " + tmp_b + " name " + if_b, error)) {
        return -1;
      }
    } else {
      const std::string log = log_dir_ + "/link-" + a + "-" + b + ".log";
      l.proc = Process::Spawn(
          {link_bin_, "--delay-ms", std::to_string(delay_ms), "--loss", std::to_string(loss),
           "--seed", std::to_string(links_.size() + 1), na, if_a, nb, if_b},
          {}, log);
      // "ready" once both devices exist.
      if (!l.proc || !l.proc->WaitForLine("ready", 5000)) {
        if (error) *error = "the link emulator did not start: " + e2e::ReadAll(log);
        return -1;
      }
    }
    if (!Sh("ip -n " + na + " addr add " + ip_a + " peer " + ip_b + " dev " + if_a, error) ||
        !Sh("ip -n " + nb + " addr add " + ip_b + " peer " + ip_a + " dev " + if_b, error) ||
        !Sh("ip -n " + na + " link set " + if_a + " up", error) ||
        !Sh("ip -n " + nb + " link set " + if_b + " up", error)) {
      return -1;
    }
    links_.push_back(std::move(l));
    const int index = static_cast<int>(links_.size()) - 1;
    if (netem_ && !SetNetem(index, loss, error)) return -1;
    return index;
  }

  // Takes a link down (every packet dropped both ways) or brings it back.
  bool SetDown(int link, bool down, std::string* error) {
    Link& l = links_[link];
    if (!netem_) {
      l.proc->Signal(down ? SIGUSR1 : SIGUSR2);
      return true;
    }
    return SetNetem(link, down ? 1.0 : l.loss, error);
  }

  bool Route(const std::string& host, const std::string& route, std::string* error) {
    return Sh("ip -n " + Ns(host) + " route add " + route, error);
  }

  // Makes `host` a NAT router: forwards, and masquerades what leaves through `wan_if`.
  bool Masquerade(const std::string& host, const std::string& wan_if, std::string* error) {
    const std::string exec = "ip netns exec " + Ns(host) + " ";
    return Sh(exec + "sysctl -q -w net.ipv4.ip_forward=1", error) &&
           Sh(exec + "nft add table ip nat", error) &&
           Sh(exec + "nft 'add chain ip nat post { type nat hook postrouting priority 100 ; }'",
              error) &&
           Sh(exec + "nft add rule ip nat post oifname " + wan_if + " counter masquerade", error);
  }

  // Packets masqueraded so far by the NAT router `host` (-1 when unreadable).
  long MasqueradedPackets(const std::string& host) {
    auto [rc, out] = RunCommand("ip netns exec " + Ns(host) + " nft list chain ip nat post");
    const size_t at = out.find("packets ");
    if (rc != 0 || at == std::string::npos) return -1;
    return std::atol(out.c_str() + at + 8);
  }

  // Starts `argv` inside `host` with its output in `log`.
  std::unique_ptr<Process> Spawn(const std::string& host, const std::vector<std::string>& argv,
                                 const std::string& log) {
    std::vector<std::string> full = {ip_, "netns", "exec", Ns(host)};
    full.insert(full.end(), argv.begin(), argv.end());
    return Process::Spawn(full, {}, log);
  }

 private:
  struct Link {
    std::string ns_a, if_a, ns_b, if_b;
    int delay_ms = 0;
    double loss = 0;
    std::unique_ptr<Process> proc;  // the user-space emulator
  };

  bool SetNetem(int link, double loss, std::string* error) {
    const Link& l = links_[link];
    const std::string spec = " root netem delay " + std::to_string(l.delay_ms) + "ms loss " +
                             std::to_string(loss * 100) + "%";
    for (auto [ns, dev] : {std::pair{l.ns_a, l.if_a}, std::pair{l.ns_b, l.if_b}}) {
      if (!Sh("tc -n " + ns + " qdisc replace dev " + dev + spec, error)) return false;
    }
    return true;
  }

  std::string link_bin_, log_dir_, prefix_;
  std::string ip_ = Which("ip");
  bool netem_ = false;
  std::vector<std::string> namespaces_;
  std::vector<Link> links_;
};

}  // namespace lathe::deploy

#endif  // LATHE_TESTS_DEPLOY_NETNS_H_
