#include "measure/measurer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ir/target.h"
#include "ir/trace.h"
#include "measure/measure_child.h"
#include "proto/trace_io.h"

#ifdef LATHE_HAVE_CUDA_BACKEND
#include "codegen/cuda/cuda_driver.h"
#endif

extern char** environ;

namespace lathe::measure {

namespace {

std::string Errno(const char* what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

bool Executable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

// Whether GPU `ordinal` can be measured on from this machine: checked here too, so that a
// machine without a GPU answers at once, without a child round trip.
absl::Status GpuPresent(int ordinal) {
#ifdef LATHE_HAVE_CUDA_BACKEND
  auto driver = codegen::cuda::CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  auto count = (*driver)->DeviceCount();
  if (!count.ok()) return count.status();
  if (ordinal < 0 || ordinal >= *count) {
    return absl::FailedPreconditionError(
        absl::StrCat("no such device (this machine has ", *count, " GPUs)"));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError("this build has no CUDA backend");
#endif
}

}  // namespace

absl::StatusOr<std::string> FindMeasureChild() {
  if (const char* env = std::getenv("LATHE_MEASURE_BIN"); env && Executable(env)) return env;
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = 0;
    std::string dir(self);
    dir = dir.substr(0, dir.rfind('/'));
    for (const std::string& cand : {dir + "/lathe-measure", dir + "/../bin/lathe-measure"}) {
      if (Executable(cand)) return cand;
    }
  }
  return absl::NotFoundError(
      "measurement child 'lathe-measure' not found next to this executable; set "
      "LATHE_MEASURE_BIN to its path");
}

absl::Status WriteFrame(int fd, const std::string& bytes) {
  uint32_t len = static_cast<uint32_t>(bytes.size());
  unsigned char hdr[4] = {static_cast<unsigned char>(len), static_cast<unsigned char>(len >> 8),
                          static_cast<unsigned char>(len >> 16),
                          static_cast<unsigned char>(len >> 24)};
  std::string buf(reinterpret_cast<char*>(hdr), 4);
  buf += bytes;
  size_t off = 0;
  while (off < buf.size()) {
    ssize_t w = write(fd, buf.data() + off, buf.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return absl::UnavailableError(Errno("write to measurement pipe"));
    off += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

namespace {

absl::Status ReadExact(int fd, char* out, size_t n, std::chrono::steady_clock::time_point deadline,
                       bool has_deadline) {
  size_t off = 0;
  while (off < n) {
    int wait_ms = -1;
    if (has_deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) return absl::DeadlineExceededError("measurement deadline passed");
      wait_ms = static_cast<int>(left);
    }
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, wait_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return absl::UnavailableError(Errno("poll"));
    if (r == 0) return absl::DeadlineExceededError("measurement deadline passed");
    ssize_t got = read(fd, out + off, n - off);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return absl::UnavailableError("measurement child closed its pipe");
    off += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFrame(int fd, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool has_deadline = timeout_ms >= 0;
  unsigned char hdr[4];
  if (auto s = ReadExact(fd, reinterpret_cast<char*>(hdr), 4, deadline, has_deadline); !s.ok()) {
    return s;
  }
  uint32_t len = hdr[0] | (hdr[1] << 8) | (hdr[2] << 16) | (static_cast<uint32_t>(hdr[3]) << 24);
  if (len > (64u << 20)) return absl::DataLossError(absl::StrCat("frame of ", len, " bytes"));
  std::string body(len, '\0');
  if (auto s = ReadExact(fd, body.data(), len, deadline, has_deadline); !s.ok()) return s;
  return body;
}

absl::StatusOr<std::unique_ptr<Measurer>> Measurer::Create(MeasurerOptions options) {
  // A child that dies between requests must not take this process down with SIGPIPE; the
  // failed write is reported instead.
  struct sigaction old_action;
  if (sigaction(SIGPIPE, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  if (options.child_path.empty()) {
    auto p = FindMeasureChild();
    if (!p.ok()) return p.status();
    options.child_path = *p;
  }
  std::unique_ptr<Measurer> m(new Measurer(std::move(options)));
  if (auto s = m->Spawn(); !s.ok()) return s;
  return m;
}

Measurer::~Measurer() { Kill(); }

absl::Status Measurer::Spawn() {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return absl::UnavailableError(Errno("pipe"));
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return absl::UnavailableError(Errno("pipe"));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so a timeout kills everything it started.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  for (const std::string& e : options_.child_env) env.push_back(e);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string path = options_.child_path;
  std::vector<std::string> args =
      ChildArgs(ChildOptions{options_.gpu_ordinal, options_.emulated_arch});
  std::vector<char*> argv = {path.data()};
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, path.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    return absl::UnavailableError(absl::StrCat("cannot start ", path, ": ", std::strerror(rc)));
  }
  pid_ = pid;
  to_child_ = in[1];
  from_child_ = out[0];
  return absl::OkStatus();
}

void Measurer::Kill() {
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    int st;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  if (to_child_ >= 0) close(to_child_);
  if (from_child_ >= 0) close(from_child_);
  pid_ = -1;
  to_child_ = from_child_ = -1;
}

absl::StatusOr<lathe::v1::MeasureResult> Measurer::Measure(
    const lathe::v1::MeasureRequest& request) {
  // The trace is parsed here once: the child receives it as a message, the workload named
  // once (an unparsable trace is sent as it came, the child's to report).
  absl::StatusOr<ir::Trace> trace = traceio::RequestTrace(request);
  bool gpu = false;
  lathe::v1::MeasureRequest typed;
  if (trace.ok()) {
    absl::StatusOr<ir::Target> target = ir::ParseTarget(trace->target);
    gpu = target.ok() && target->is_gpu();
    if (!traceio::HasTraceMessage(request)) {
      typed = request;
      traceio::SetRequestTrace(*trace, &typed);
    }
  }
  const lathe::v1::MeasureRequest& sent = traceio::HasTraceMessage(typed) ? typed : request;
  if (gpu && options_.emulated_arch.empty()) {
    if (absl::Status s = GpuPresent(options_.gpu_ordinal); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("no GPU to measure on: cuda:", options_.gpu_ordinal, ": ", s.message()));
    }
  }
  if (pid_ <= 0) {
    if (auto s = Spawn(); !s.ok()) return s;
  }
  lathe::v1::MeasureResult result;
  result.set_candidate_id(request.candidate_id());
  absl::Status st = WriteFrame(to_child_, sent.SerializeAsString());
  absl::StatusOr<std::string> reply =
      st.ok() ? ReadFrame(from_child_, static_cast<int>(options_.timeout_s * 1000))
              : absl::StatusOr<std::string>(st);
  if (reply.ok() && result.ParseFromString(*reply)) {
    if (result.error_class() == lathe::v1::NO_DEVICE) {
      return absl::FailedPreconditionError(result.error_msg());
    }
    if (gpu && result.error_class() == lathe::v1::RUNTIME_ERROR) {
      // The emulator reports a candidate's fault without being harmed by it.
      if (!options_.emulated_arch.empty()) return result;
      // The child's context may be poisoned (it exits after a sticky error): replace it now,
      // before the next candidate could meet a dead pipe.
      Kill();
      ++restarts_;
      if (auto s = Spawn(); !s.ok()) return s;
    }
    return result;
  }

  // The child hung, died, or spoke garbage: classify, then replace it.
  bool timed_out = absl::IsDeadlineExceeded(reply.status());
  std::string why;
  if (!timed_out) {
    kill(-pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status)) {
      why = absl::StrCat("measurement child killed by signal ", WTERMSIG(status), " (",
                         strsignal(WTERMSIG(status)), ")");
    } else if (WIFEXITED(status)) {
      why = absl::StrCat("measurement child exited with status ", WEXITSTATUS(status));
    } else {
      why = std::string(reply.status().message());
    }
    pid_ = -1;
  }
  Kill();
  ++restarts_;
  result.set_error_class(timed_out ? lathe::v1::TIMEOUT : lathe::v1::RUNTIME_ERROR);
  result.set_error_msg(timed_out ? absl::StrCat("no result within ", options_.timeout_s,
                                                " s; the measurement child was killed")
                                 : why);
  if (auto s = Spawn(); !s.ok()) return s;
  return result;
}

}  // namespace lathe::measure
