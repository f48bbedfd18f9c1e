// \file
// Builds LLVM IR for lowered functions with IRBuilder (internal to codegen/). Each function
// becomes the exported C-ABI entry `int NAME(void* const* args, int num_args)` plus internal
// bodies; parallel loops are outlined and run through lathe_parallel_for.
#ifndef LATHE_CODEGEN_LLVM_CODEGEN_H_
#define LATHE_CODEGEN_LLVM_CODEGEN_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/stmt.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Target/TargetMachine.h"

namespace lathe::codegen {

// Generates an unoptimized module holding `funcs` for `tm`, each compiled as it is: lower
// them with Lower()'s CPU recipe, which versions and vectorizes. Fails on constructs the CPU
// cannot run (thread bindings, a loop still marked kVectorized).
absl::StatusOr<std::unique_ptr<llvm::Module>> GenerateModule(
    const std::vector<ir::LoweredFunc>& funcs, llvm::LLVMContext& ctx,
    const llvm::TargetMachine& tm);

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_LLVM_CODEGEN_H_
