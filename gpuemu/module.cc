#include "gpuemu/module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gpuemu/host_compiler.h"

namespace lathe::gpuemu {

namespace {

absl::StatusOr<std::string> MakeTempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/lathe-emu-XXXXXX");
  if (!mkdtemp(templ.data())) {
    return absl::InternalError(absl::StrCat("mkdtemp ", templ, ": ", std::strerror(errno)));
  }
  return templ;
}

}  // namespace

bool KernelUsesBarriers(const std::string& cuda_text, const std::string& name) {
  size_t pos = 0;
  // The definition: the name followed by its parameter list after `__global__`.
  for (;;) {
    pos = cuda_text.find(name + "(", pos);
    if (pos == std::string::npos) return true;
    bool starts = pos == 0 || !(std::isalnum(static_cast<unsigned char>(cuda_text[pos - 1])) ||
                                cuda_text[pos - 1] == '_');
    size_t line = cuda_text.rfind('\n', pos);
    line = line == std::string::npos ? 0 : line;
    if (starts && cuda_text.find("__global__", line) < pos) break;
    pos += name.size();
  }
  size_t end = cuda_text.find("extern \"C\"", pos);
  // Warp-level mma helpers wait for their warp as __syncthreads() waits for the block.
  const std::string body =
      cuda_text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
  return body.find("__syncthreads") != std::string::npos ||
         body.find("lathe_mma_") != std::string::npos;
}

absl::StatusOr<std::unique_ptr<EmuModule>> EmuModule::Build(
    const std::string& cuda_text, const std::vector<KernelSignature>& kernels, OptLevel opt) {
  auto cxx = FindHostCompiler();
  if (!cxx.ok()) return cxx.status();
  auto dir = MakeTempDir();
  if (!dir.ok()) return dir.status();
  std::unique_ptr<EmuModule> m(new EmuModule);
  m->dir_ = *dir;
  const std::string src = m->dir_ + "/kernel.cc", so = m->dir_ + "/kernel.so";
  {
    std::ofstream f(src, std::ios::binary);
    f << TranslationUnit(cuda_text, "kernel.cu", kernels);
    if (!f) return absl::InternalError("cannot write " + src);
  }
  auto t0 = std::chrono::steady_clock::now();
  absl::Status built = CompileModule(src, so, opt);
  m->compile_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  unlink(src.c_str());
  if (!built.ok()) return built;
  m->handle_ = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  unlink(so.c_str());
  if (!m->handle_)
    return absl::InternalError(absl::StrCat("dlopen of the kernel module: ", dlerror()));
  auto sym = [&](const std::string& n) { return dlsym(m->handle_, n.c_str()); };
  auto init = reinterpret_cast<void (*)(const EmuRuntimeApi*)>(sym("lathe_emu_init"));
  m->entries_.set_current =
      reinterpret_cast<void (*)(const EmuThreadState*)>(sym("lathe_emu_set_current"));
  auto shared = reinterpret_cast<void (*)(char**, char**)>(sym("lathe_emu_shared"));
  if (!init || !m->entries_.set_current || !shared) {
    return absl::InternalError("the kernel module lacks the emulator's entry points");
  }
  InitModule(init);
  shared(&m->entries_.shared_begin, &m->entries_.shared_end);
  if (!m->entries_.shared_begin || !m->entries_.shared_end) {
    m->entries_.shared_begin = m->entries_.shared_end = nullptr;
  }
  for (const KernelSignature& k : kernels) {
    Kernel kk;
    kk.entry = reinterpret_cast<void (*)(float* const*)>(sym("lathe_emu_entry_" + k.name));
    if (!kk.entry) return absl::InternalError("the kernel module lacks kernel '" + k.name + "'");
    kk.num_args = k.num_args;
    kk.uses_barriers = KernelUsesBarriers(cuda_text, k.name);
    m->kernels_[k.name] = kk;
  }
  return m;
}

EmuModule::~EmuModule() {
  if (handle_) dlclose(handle_);
  if (!dir_.empty()) rmdir(dir_.c_str());
}

absl::Status EmuModule::Launch(const std::string& name, const int64_t grid[3],
                               const int64_t block[3], const std::vector<float*>& args) {
  auto it = kernels_.find(name);
  if (it == kernels_.end()) return absl::NotFoundError("no kernel '" + name + "' in the module");
  if (static_cast<int>(args.size()) != it->second.num_args) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", name, "' takes ", it->second.num_args, " arguments, got ", args.size()));
  }
  LaunchSpec spec;
  spec.kernel = name;
  spec.entry = it->second.entry;
  spec.uses_barriers = it->second.uses_barriers;
  for (int d = 0; d < 3; ++d) {
    spec.grid[d] = grid[d];
    spec.block[d] = block[d];
  }
  return RunKernel(entries_, spec, args);
}

}  // namespace lathe::gpuemu
