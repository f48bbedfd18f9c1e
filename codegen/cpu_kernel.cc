#include "codegen/cpu_kernel.h"

#include <fstream>
#include <utility>

#include "codegen/jit.h"
#include "codegen/link.h"
#include "codegen/llvm_codegen.h"
#include "codegen/llvm_target.h"
#include "llvm/Support/raw_ostream.h"

namespace lathe::codegen {

namespace {

class JitCpuKernel : public CpuKernel {
 public:
  JitCpuKernel(std::unique_ptr<JitModule> jit, KernelFn fn) : jit_(std::move(jit)), fn_(fn) {}
  KernelFn fn() const override { return fn_; }

 private:
  std::unique_ptr<JitModule> jit_;
  KernelFn fn_;
};

struct Built {
  std::unique_ptr<llvm::LLVMContext> ctx;
  std::unique_ptr<llvm::Module> mod;
  std::unique_ptr<llvm::TargetMachine> tm;
};

absl::StatusOr<Built> BuildOptimized(const std::vector<ir::LoweredFunc>& funcs, bool jit) {
  Built b;
  auto tm = CreateHostTargetMachine(jit);
  if (!tm.ok()) return tm.status();
  b.tm = std::move(*tm);
  b.ctx = std::make_unique<llvm::LLVMContext>();
  auto mod = GenerateModule(funcs, *b.ctx, *b.tm);
  if (!mod.ok()) return mod.status();
  b.mod = std::move(*mod);
  if (auto st = OptimizeModule(*b.mod, *b.tm); !st.ok()) return st;
  return b;
}

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::UnavailableError("cannot write " + tmp);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return absl::UnavailableError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError("cannot rename " + tmp + " to " + path);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuKernel>> JitCompile(const ir::LoweredFunc& func) {
  auto b = BuildOptimized({func}, /*jit=*/true);
  if (!b.ok()) return b.status();
  auto jit = JitModule::Create(std::move(b->mod), std::move(b->ctx));
  if (!jit.ok()) return jit.status();
  auto addr = (*jit)->Lookup(func.name);
  if (!addr.ok()) return addr.status();
  return std::unique_ptr<CpuKernel>(
      new JitCpuKernel(std::move(*jit), reinterpret_cast<KernelFn>(*addr)));
}

absl::StatusOr<std::string> EmitLlvmIr(const std::vector<ir::LoweredFunc>& funcs) {
  auto b = BuildOptimized(funcs, /*jit=*/false);
  if (!b.ok()) return b.status();
  std::string text;
  llvm::raw_string_ostream os(text);
  b->mod->print(os, nullptr);
  return os.str();
}

absl::Status WriteObjectFile(const std::vector<ir::LoweredFunc>& funcs, const std::string& path) {
  auto b = BuildOptimized(funcs, /*jit=*/false);
  if (!b.ok()) return b.status();
  auto obj = EmitObject(*b->mod, *b->tm);
  if (!obj.ok()) return obj.status();
  return WriteFile(path, *obj);
}

absl::Status WriteSharedLibrary(const std::vector<ir::LoweredFunc>& funcs,
                                const std::string& path) {
  auto b = BuildOptimized(funcs, /*jit=*/false);
  if (!b.ok()) return b.status();
  auto obj = EmitObject(*b->mod, *b->tm);
  if (!obj.ok()) return obj.status();
  return LinkSharedLibrary({*obj}, path);
}

}  // namespace lathe::codegen
