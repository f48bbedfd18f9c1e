// lathe-worker: a measurement worker for lathed (CONTRACT.md "The CLI", DESIGN.md "Workers
// pull"). Registers this machine's devices, pulls tasks, measures them in the sandboxed
// `lathe-measure` child and reports the results. SIGTERM/SIGINT: stop leasing, finish and
// report the task in flight, hand the lease's unstarted tasks back to the daemon, exit 0; a
// second signal exits at once.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "codegen/host.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "worker/discovery.h"
#include "worker/worker_loop.h"

namespace {

constexpr int kFailure = 1;
constexpr int kUsageError = 2;

bool ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// Kills the process groups of this process's children (the measurement children lead their
// own groups), so that exiting at once leaves no child measuring for nobody.
void KillChildren() {
  const pid_t self = getpid();
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::filesystem::directory_entry& entry = *it;
    const std::string name = entry.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
    size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != self) continue;
    pid_t child = static_cast<pid_t>(std::stol(name));
    kill(-child, SIGKILL);
    kill(child, SIGKILL);
  }
}

std::string DefaultSpool() {
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::string(home) + "/.local/share/lathe/worker-spool";
  }
  return ".lathe-worker-spool";
}

}  // namespace

int main(int argc, char** argv) {
  // Signals are taken by one thread with sigwait; block them before any other thread (gRPC's
  // included) exists. The measurement child is spawned with an empty mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (absl::Status isa = lathe::codegen::CheckCpuIsaCap(); !isa.ok()) {
    std::fprintf(stderr, "lathe-worker: %s\n", std::string(isa.message()).c_str());
    return 2;
  }
  CLI::App app{"lathe-worker: measures candidates for a lathed tuning daemon"};
  app.set_version_flag("--version", "lathe-worker 0.1.0");
  lathe::worker::WorkerOptions opt;
  std::string token_file, tls_ca, tls_cert, tls_key, log_level = "info";
  std::vector<std::string> devices;
  opt.spool_dir = DefaultSpool();
  app.add_option("--tuner", opt.tuner, "the lathed daemon, HOST:PORT")->required();
  app.add_option("--token-file", token_file, "file holding the daemon's shared token");
  auto* ca = app.add_option("--tls-ca", tls_ca, "PEM CA certificates: connect with TLS");
  auto* cert = app.add_option("--tls-cert", tls_cert,
                              "PEM certificate of this worker, for a daemon that requires client "
                              "certificates (lathed --tls-client-ca)");
  auto* key = app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert");
  cert->needs(key)->needs(ca);
  key->needs(cert);
  app.add_option("--device", devices,
                 "device to register: cpu (default), cuda (GPU 0), cuda:N or cuda-emu:sm_XX (the "
                 "GPU emulator: checks GPU candidates without a GPU, its timings are not GPU "
                 "performance); repeatable. Each device measures in its own child process");
  app.add_option("--max-tasks", opt.max_tasks,
                 "exit after measuring and reporting this many tasks (0: run until stopped)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch", opt.lease_batch, "tasks asked for per lease (default 4)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lease-ahead", opt.lease_ahead,
                 "leases held ahead of the one being measured, reports sent in the background "
                 "(default 1; 0: lease, measure and report in turn)")
      ->check(CLI::Range(0, 16));
  app.add_option("--spool", opt.spool_dir,
                 "directory for results kept while the daemon is away (default "
                 "~/.local/share/lathe/worker-spool)");
  app.add_option("--timeout-s", opt.measurer.timeout_s,
                 "deadline of one candidate's measurement (default 60)")
      ->check(CLI::PositiveNumber);
  app.add_option("--log-level", log_level, "trace, debug, info (default), warn, error");
  CLI11_PARSE(app, argc, argv);

  spdlog::set_default_logger(spdlog::stderr_color_mt("lathe-worker"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ lathe-worker: %v");
  spdlog::set_level(spdlog::level::from_str(log_level));

  if (!token_file.empty()) {
    if (!ReadWholeFile(token_file, &opt.token)) {
      std::fprintf(stderr, "lathe-worker: cannot read the token file %s\n", token_file.c_str());
      return kFailure;
    }
    opt.token = std::string(absl::StripAsciiWhitespace(opt.token));
    if (opt.token.empty()) {
      std::fprintf(stderr, "lathe-worker: the token file %s is empty\n", token_file.c_str());
      return kFailure;
    }
  }
  if (!tls_ca.empty() && !ReadWholeFile(tls_ca, &opt.tls_ca_pem)) {
    std::fprintf(stderr, "lathe-worker: cannot read the CA file %s\n", tls_ca.c_str());
    return kFailure;
  }

  for (auto [path, out, what] : {std::tuple{&tls_cert, &opt.tls_cert_pem, "certificate"},
                                 std::tuple{&tls_key, &opt.tls_key_pem, "key"}}) {
    if (!path->empty() && !ReadWholeFile(*path, out)) {
      std::fprintf(stderr, "lathe-worker: cannot read the TLS %s file %s\n", what, path->c_str());
      return kFailure;
    }
  }

  auto selected = lathe::worker::SelectDevices(devices);
  if (!selected.ok()) {
    std::fprintf(stderr, "lathe-worker: %s\n", std::string(selected.status().message()).c_str());
    return selected.status().code() == absl::StatusCode::kInvalidArgument ? kUsageError : kFailure;
  }
  opt.devices = std::move(*selected);
  if (devices.empty()) {
    auto gpus = lathe::worker::DiscoverGpus();
    if (!gpus.empty()) {
      spdlog::info(
          "{} GPU(s) found, not registered: pass --device cuda:N (and --device cpu to keep "
          "the CPU) to measure on one",
          gpus.size());
    }
  }

  auto worker = lathe::worker::Worker::Create(std::move(opt));
  if (!worker.ok()) {
    std::fprintf(stderr, "lathe-worker: %s\n", std::string(worker.status().message()).c_str());
    return kFailure;
  }

  std::thread([&signals, w = worker->get()] {
    int sig = 0;
    sigwait(&signals, &sig);
    spdlog::info(
        "{}: no new tasks; finishing the task in flight and handing back the lease's unstarted "
        "ones (send it again to exit at once)",
        strsignal(sig));
    w->Stop();
    sigwait(&signals, &sig);
    spdlog::warn("{} again: exiting now; the task in flight is abandoned (its lease expires)",
                 strsignal(sig));
    KillChildren();
    spdlog::shutdown();
    _exit(128 + sig);
  }).detach();

  absl::Status st = (*worker)->Run();
  if (!st.ok()) {
    std::fprintf(stderr, "lathe-worker: %s\n", std::string(st.message()).c_str());
    std::_Exit(kFailure);
  }
  spdlog::shutdown();
  // Skips static destructors while the signal thread may still be parked in sigwait.
  std::_Exit(0);
}
