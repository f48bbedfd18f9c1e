#include "gpuemu/host_compiler.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace lathe::gpuemu {

namespace {

bool Executable(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// `name` itself when it is a path, else the first executable of that name on $PATH.
std::string Lookup(const std::string& name) {
  if (name.find('/') != std::string::npos) return Executable(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (absl::string_view d : absl::StrSplit(dirs, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(d, "/", name);
    if (Executable(candidate)) return candidate;
  }
  return "";
}

absl::StatusOr<std::string> Find() {
  // A compiler named by the user is the one used, or an error: never silently another.
  if (const char* env = std::getenv("LATHE_EMU_CXX"); env && *env) {
    std::string found = Lookup(env);
    if (!found.empty()) return found;
    return absl::FailedPreconditionError(
        absl::StrCat("LATHE_EMU_CXX='", env, "' is not an executable file"));
  }
  for (const char* n : {"c++", "g++", "clang++"}) {
    std::string found = Lookup(n);
    if (!found.empty()) return found;
  }
  return absl::FailedPreconditionError(
      "the GPU emulator needs a host C++ compiler and found none (c++, g++ or clang++ on PATH): "
      "install g++ (Debian: apt-get install build-essential) or set LATHE_EMU_CXX");
}

std::string ReadHead(const std::string& path, size_t max) {
  std::ifstream f(path, std::ios::binary);
  std::string s(max, '\0');
  f.read(s.data(), static_cast<std::streamsize>(max));
  s.resize(static_cast<size_t>(f.gcount()));
  return s;
}

}  // namespace

absl::StatusOr<std::string> FindHostCompiler() {
  static const absl::StatusOr<std::string>* found = new absl::StatusOr<std::string>(Find());
  return *found;
}

std::vector<std::string> ModuleCompileFlags(OptLevel opt) {
  // -O1: a fraction of -O2's compile time, most of its speed on this straight-line code.
  // The sanitizer's index checks need no runtime: the platform header defines their
  // handlers, and --as-needed drops the runtime library the driver adds. (Alignment is
  // checked by float4 itself: -fsanitize=alignment on every scalar access tripled the run
  // time of simple kernels.)
  return {"-x",
          "c++",
          "-std=c++17",
          opt == OptLevel::kFast ? "-O0" : "-O1",
          "-fPIC",
          "-shared",
          "-fno-strict-aliasing",
          "-fsanitize=bounds",
          "-fno-sanitize-recover=all",
          "-w",
          "-Wl,--as-needed"};
}

absl::Status CompileModule(const std::string& source_path, const std::string& output_path,
                           OptLevel opt) {
  auto cxx = FindHostCompiler();
  if (!cxx.ok()) return cxx.status();
  std::vector<std::string> args = {*cxx};
  for (const std::string& f : ModuleCompileFlags(opt)) args.push_back(f);
  args.insert(args.end(), {"-o", output_path, source_path});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const std::string log_path = output_path + ".log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setsigmask(&attr, &none);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", *cxx, ": ", std::strerror(rc)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
  }
  std::string log = ReadHead(log_path, 8192);
  unlink(log_path.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  std::string how = WIFEXITED(status) ? absl::StrCat("exit status ", WEXITSTATUS(status))
                                      : absl::StrCat("signal ", WTERMSIG(status));
  return absl::InvalidArgumentError(
      absl::StrCat("host compiler ", *cxx, " failed (", how, ") on ", source_path, ":\n", log));
}

}  // namespace lathe::gpuemu
