// \file
// The host LLVM target inside codegen/: target initialisation, the host TargetMachine, the O3
// optimisation pipeline and in-memory object emission. Internal to codegen/ (LLVM types).
#ifndef LATHE_CODEGEN_LLVM_TARGET_H_
#define LATHE_CODEGEN_LLVM_TARGET_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/Module.h"
#include "llvm/Target/TargetMachine.h"

namespace lathe::codegen {

// Initialises LLVM's native target, asm printer and asm parser once; thread-safe.
void InitializeNativeTarget();

// A TargetMachine for the host triple, CPU (llvm::sys::getHostCPUName) and features, with
// CodeGenOpt::Aggressive and the PIC relocation model. `jit` selects the small code model
// used by the in-process JIT; otherwise the default model for shared objects.
absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> CreateHostTargetMachine(bool jit);

// Sets "target-cpu", "target-features" from `tm` on `fn`, and "prefer-vector-width"="512"
// when the target has AVX-512 (LLVM otherwise prefers 256-bit vectors on some Intel CPUs).
void ApplyHostAttributes(llvm::Function& fn, const llvm::TargetMachine& tm);

// Sets the module's data layout and triple from `tm` and runs the new pass manager's O3
// pipeline with `tm`'s cost models (loop and SLP vectorisation, unrolling). Fails when the
// module does not verify, before or after.
absl::Status OptimizeModule(llvm::Module& module, llvm::TargetMachine& tm);

// Compiles `module` to an ELF relocatable object in memory (legacy pass manager, the only one
// that drives codegen in LLVM 14). The module's data layout and triple are set from `tm`.
absl::StatusOr<std::string> EmitObject(llvm::Module& module, llvm::TargetMachine& tm);

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_LLVM_TARGET_H_
