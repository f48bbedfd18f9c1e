// \file
// Host target machine, O3 pipeline and object emission (codegen/llvm_target.h).
#include "codegen/llvm_target.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "codegen/host.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Analysis/CGSCCPassManager.h"
#include "llvm/Analysis/LoopAnalysisManager.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/PassManager.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/Host.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetOptions.h"

namespace lathe::codegen {
namespace {

void SetLayout(llvm::Module& module, const llvm::TargetMachine& tm) {
  module.setDataLayout(tm.createDataLayout());
  module.setTargetTriple(tm.getTargetTriple().str());
}

absl::Status Verify(const llvm::Module& module, const char* when) {
  std::string message;
  llvm::raw_string_ostream os(message);
  if (llvm::verifyModule(module, &os)) {
    return absl::InternalError(absl::StrCat("llvm module '", module.getName().str(),
                                            "' fails to verify ", when, ": ", os.str()));
  }
  return absl::OkStatus();
}

}  // namespace

void InitializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> CreateHostTargetMachine(bool jit) {
  InitializeNativeTarget();
  const std::string triple = llvm::sys::getProcessTriple();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (target == nullptr) {
    return absl::InternalError(absl::StrCat("no llvm target for triple '", triple, "': ", error));
  }
  llvm::TargetOptions options;
  // Kernels are float code whose reference check tolerates reassociation; contraction into
  // FMA is what every BLAS does.
  options.AllowFPOpFusion = llvm::FPOpFusion::Fast;
  llvm::Optional<llvm::CodeModel::Model> code_model;
  if (jit) code_model = llvm::CodeModel::Small;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, HostCpu().llvm_cpu, HostFeatureString(), options, llvm::Reloc::PIC_, code_model,
      llvm::CodeGenOpt::Aggressive, jit));
  if (tm == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create llvm target machine for '", triple,
                                            "' cpu '", HostCpu().llvm_cpu, "'"));
  }
  return tm;
}

void ApplyHostAttributes(llvm::Function& fn, const llvm::TargetMachine& tm) {
  fn.addFnAttr("target-cpu", tm.getTargetCPU());
  const llvm::StringRef features = tm.getTargetFeatureString();
  fn.addFnAttr("target-features", features);
  if (features.contains("+avx512f")) fn.addFnAttr("prefer-vector-width", "512");
}

absl::Status OptimizeModule(llvm::Module& module, llvm::TargetMachine& tm) {
  SetLayout(module, tm);
  if (absl::Status status = Verify(module, "before optimisation"); !status.ok()) return status;

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  // Schedules vectorize and unroll explicitly (Lower()'s recipe); LLVM's own loop vectorizer
  // and unroller would only re-do that work on every candidate and dominate JIT time.
  tuning.LoopVectorization = false;
  tuning.SLPVectorization = false;
  tuning.LoopUnrolling = false;
  llvm::PassBuilder builder(&tm, tuning);
  builder.registerModuleAnalyses(mam);
  builder.registerCGSCCAnalyses(cgam);
  builder.registerFunctionAnalyses(fam);
  builder.registerLoopAnalyses(lam);
  builder.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(module, mam);
  return Verify(module, "after optimisation");
}

absl::StatusOr<std::string> EmitObject(llvm::Module& module, llvm::TargetMachine& tm) {
  SetLayout(module, tm);
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_ObjectFile)) {
    return absl::InternalError(
        absl::StrCat("llvm target '", tm.getTargetTriple().str(), "' cannot emit object files"));
  }
  pm.run(module);
  return std::string(buffer.data(), buffer.size());
}

}  // namespace lathe::codegen
