// \file
// An in-process JIT for one LLVM module (ORC LLJIT), internal to codegen/. The runtime and the
// few libm/libc functions kernels call are bound explicitly, so JIT'd code never depends on
// the process's dynamic symbol table.
#ifndef LATHE_CODEGEN_JIT_H_
#define LATHE_CODEGEN_JIT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

namespace lathe::codegen {

// Owns one LLJIT and the code of one module. The module is compiled as given: the caller
// optimises it first (OptimizeModule in codegen/llvm_target.h); JitModule only runs codegen
// with a target machine configured like CreateHostTargetMachine(/*jit=*/true) (host CPU and
// features, CodeGenOpt::Aggressive). Code lives until the JitModule is destroyed.
//
// Thread-safety: Create may run concurrently on several threads (each JitModule has its own
// LLJIT and context); Lookup is thread-safe; the code found may be called from any thread.
class JitModule {
 public:
  // Compiles `module` (which must belong to `context`) eagerly, so codegen errors surface
  // here rather than at the first call. Fails on a module that does not verify, an
  // unresolved external symbol, or an LLVM error, with LLVM's message.
  static absl::StatusOr<std::unique_ptr<JitModule>> Create(
      std::unique_ptr<llvm::Module> module, std::unique_ptr<llvm::LLVMContext> context);

  ~JitModule();
  JitModule(const JitModule&) = delete;
  JitModule& operator=(const JitModule&) = delete;

  // The address of the function or global `name` (unmangled, as named in the module);
  // NotFound when the module does not define it.
  absl::StatusOr<void*> Lookup(const std::string& name) const;

 private:
  explicit JitModule(std::unique_ptr<llvm::orc::LLJIT> jit);
  std::unique_ptr<llvm::orc::LLJIT> jit_;
};

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_JIT_H_
