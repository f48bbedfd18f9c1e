// \file
// Child processes for the end-to-end tests: spawned with their output in a log file, signalled,
// waited for with a timeout, killed and reaped when the test lets go of them.
#ifndef LATHE_TESTS_E2E_PROCESS_H_
#define LATHE_TESTS_E2E_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace lathe::e2e {

using Clock = std::chrono::steady_clock;

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A child process with stdout and stderr appended to a log file. Killed (SIGKILL) and reaped
// by the destructor when still running.
class Process {
 public:
  static std::unique_ptr<Process> Spawn(const std::vector<std::string>& argv,
                                        const std::vector<std::string>& extra_env,
                                        const std::string& log_path) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    for (const std::string& e : extra_env) env_strings.push_back(e);
    std::vector<char*> envp, args;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = argv;
    for (std::string& a : argv_copy) args.push_back(a.data());
    args.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return nullptr;
    auto p = std::unique_ptr<Process>(new Process());
    p->pid_ = pid;
    p->log_ = log_path;
    p->name_ = argv[0].substr(argv[0].rfind('/') + 1);
    return p;
  }

  ~Process() {
    if (running()) {
      kill(pid_, SIGCONT);
      kill(pid_, SIGKILL);
      Wait(10000);
    }
  }

  pid_t pid() const { return pid_; }
  const std::string& log() const { return log_; }
  const std::string& name() const { return name_; }
  bool running() const { return pid_ > 0 && !exited_; }

  void Signal(int sig) {
    if (running()) kill(pid_, sig);
  }

  // The exit status (or 128 + signal) once the process ended within timeout_ms, else nullopt.
  std::optional<int> Wait(int timeout_ms) {
    if (exited_) return status_;
    auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      int st = 0;
      pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return status_;
      }
      if (r < 0 || Clock::now() >= until) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Waits for a line of the log that starts with `prefix`; returns the rest of that line.
  std::optional<std::string> WaitForLine(const std::string& prefix, int timeout_ms) {
    auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < until) {
      std::istringstream in(ReadAll(log_));
      for (std::string line; std::getline(in, line);) {
        if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
      }
      if (Wait(0).has_value()) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
  }

 private:
  Process() = default;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = -1;
  std::string log_;
  std::string name_;
};

// Runs a command line through the shell; returns (exit status, stdout).
inline std::pair<int, std::string> RunCommand(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int st = pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace lathe::e2e

#endif  // LATHE_TESTS_E2E_PROCESS_H_
