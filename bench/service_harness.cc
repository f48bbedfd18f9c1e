#include "bench/service_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "client/client.h"

extern char** environ;

namespace lathe::bench {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string TempDir() {
  char tmpl[] = "/tmp/lathe_bench_service_XXXXXX";
  return mkdtemp(tmpl);
}

std::chrono::system_clock::time_point In(int ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

std::string SubmitJob(const std::string& address, const std::string& workload, int trials,
                      int batch) {
  lathe::client::ClientOptions co;
  co.address = address;
  auto client = lathe::client::TunerClient::Connect(co);
  if (!client.ok()) {
    std::printf("   connect: %s\n", client.status().ToString().c_str());
    return "";
  }
  lathe::v1::JobSpec spec;
  spec.add_workloads(workload);
  spec.set_target("cpu");
  spec.set_device_class(lathe::codegen::HostDeviceClass());
  spec.set_trials(trials);
  spec.set_batch(batch);
  spec.set_seed(1);
  spec.set_min_repeat_ms(1);
  auto id = (*client)->SubmitJob(spec);
  if (!id.ok()) {
    std::printf("   submit: %s\n", id.status().ToString().c_str());
    return "";
  }
  return *id;
}

std::unique_ptr<Child> Spawn(std::vector<std::string> argv, const std::string& log) {
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  auto c = std::make_unique<Child>();
  int rc = posix_spawn(&c->pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) c->pid = -1;
  return c;
}

double TreeCpuSeconds(const std::vector<pid_t>& pids, double* runqueue_s) {
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  auto stat = [](const std::string& path, pid_t* ppid, double* ticks) {
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line)) return false;
    size_t close = line.rfind(')');
    if (close == std::string::npos) return false;
    std::istringstream rest(line.substr(close + 2));
    std::string state;
    long long v = 0, ut = 0, st = 0;
    rest >> state >> *ppid;
    for (int field = 5; field <= 13 && rest >> v; ++field) {
    }
    rest >> ut >> st;
    *ticks = static_cast<double>(ut + st);
    return true;
  };
  double total = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    pid_t ppid = 0;
    double ticks = 0;
    if (!stat(it->path().string() + "/stat", &ppid, &ticks)) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    for (pid_t p : pids) {
      if (pid != p && ppid != p) continue;
      total += ticks / tick;
      if (runqueue_s == nullptr) continue;
      std::ifstream sched(it->path().string() + "/schedstat");
      long long on_cpu = 0, waiting = 0;
      if (sched >> on_cpu >> waiting) *runqueue_s += waiting * 1e-9;
    }
  }
  return total;
}

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

std::map<std::string, double> ThreadCpuByName() {
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::map<std::string, double> by_name;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/task", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::ifstream stat(it->path().string() + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    for (int k = 3; k <= 13 && rest >> field; ++k) {
    }
    long long ut = 0, st = 0;
    if (rest >> ut >> st) by_name[line.substr(open + 1, close - open - 1)] += (ut + st) / tick;
  }
  return by_name;
}

}  // namespace lathe::bench
