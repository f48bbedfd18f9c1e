// \file
// ORC LLJIT wrapper (codegen/jit.h).
#include "codegen/jit.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/host.h"
#include "codegen/llvm_target.h"
#include "codegen/runtime/runtime.h"
#include "llvm/ExecutionEngine/JITSymbol.h"
#include "llvm/ExecutionEngine/Orc/Core.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/ExecutionEngine/Orc/ThreadSafeModule.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/Host.h"
#include "llvm/Support/raw_ostream.h"

namespace lathe::codegen {
namespace {

absl::Status ToStatus(llvm::Error error, const std::string& what) {
  if (!error) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", llvm::toString(std::move(error))));
}

struct NamedSymbol {
  const char* name;
  void* address;
};

// Everything JIT'd kernels may call outside their own module. Casts go through function
// pointer types that pick the float overloads from <cmath>.
std::vector<NamedSymbol> HostSymbols() {
  using F1 = float (*)(float);
  using F2 = float (*)(float, float);
  using F3 = float (*)(float, float, float);
  using D1 = double (*)(double);
  return {
      {"lathe_parallel_for", reinterpret_cast<void*>(&lathe_parallel_for)},
      {"lathe_num_threads", reinterpret_cast<void*>(&lathe_num_threads)},
      {"lathe_alloc", reinterpret_cast<void*>(&lathe_alloc)},
      {"lathe_free", reinterpret_cast<void*>(&lathe_free)},
      {"memset", reinterpret_cast<void*>(&memset)},
      {"memcpy", reinterpret_cast<void*>(&memcpy)},
      {"memmove", reinterpret_cast<void*>(&memmove)},
      {"expf", reinterpret_cast<void*>(static_cast<F1>(&expf))},
      {"logf", reinterpret_cast<void*>(static_cast<F1>(&logf))},
      {"sqrtf", reinterpret_cast<void*>(static_cast<F1>(&sqrtf))},
      {"tanhf", reinterpret_cast<void*>(static_cast<F1>(&tanhf))},
      {"fabsf", reinterpret_cast<void*>(static_cast<F1>(&fabsf))},
      {"erff", reinterpret_cast<void*>(static_cast<F1>(&erff))},
      {"floorf", reinterpret_cast<void*>(static_cast<F1>(&floorf))},
      {"ceilf", reinterpret_cast<void*>(static_cast<F1>(&ceilf))},
      {"roundf", reinterpret_cast<void*>(static_cast<F1>(&roundf))},
      {"sinf", reinterpret_cast<void*>(static_cast<F1>(&sinf))},
      {"cosf", reinterpret_cast<void*>(static_cast<F1>(&cosf))},
      {"powf", reinterpret_cast<void*>(static_cast<F2>(&powf))},
      {"fmaxf", reinterpret_cast<void*>(static_cast<F2>(&fmaxf))},
      {"fminf", reinterpret_cast<void*>(static_cast<F2>(&fminf))},
      {"fmodf", reinterpret_cast<void*>(static_cast<F2>(&fmodf))},
      {"fmaf", reinterpret_cast<void*>(static_cast<F3>(&fmaf))},
      {"exp", reinterpret_cast<void*>(static_cast<D1>(&exp))},
      {"log", reinterpret_cast<void*>(static_cast<D1>(&log))},
      {"sqrt", reinterpret_cast<void*>(static_cast<D1>(&sqrt))},
      {"tanh", reinterpret_cast<void*>(static_cast<D1>(&tanh))},
  };
}

}  // namespace

JitModule::JitModule(std::unique_ptr<llvm::orc::LLJIT> jit) : jit_(std::move(jit)) {}

JitModule::~JitModule() = default;

absl::StatusOr<std::unique_ptr<JitModule>> JitModule::Create(
    std::unique_ptr<llvm::Module> module, std::unique_ptr<llvm::LLVMContext> context) {
  if (module == nullptr || context == nullptr) {
    return absl::InvalidArgumentError("jit module: null module or context");
  }
  if (&module->getContext() != context.get()) {
    return absl::InvalidArgumentError(absl::StrCat("jit module '", module->getName().str(),
                                                   "' does not belong to the given context"));
  }
  {
    std::string message;
    llvm::raw_string_ostream os(message);
    if (llvm::verifyModule(*module, &os)) {
      return absl::InvalidArgumentError(
          absl::StrCat("jit module '", module->getName().str(), "' fails to verify: ", os.str()));
    }
  }
  InitializeNativeTarget();

  llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(llvm::sys::getProcessTriple())};
  jtmb.setCPU(HostCpu().llvm_cpu);
  jtmb.addFeatures(HostCpu().features);  // capped by $LATHE_CPU_ISA
  jtmb.setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  jtmb.setCodeModel(llvm::CodeModel::Small);
  jtmb.getOptions().AllowFPOpFusion = llvm::FPOpFusion::Fast;

  auto data_layout = jtmb.getDefaultDataLayoutForTarget();
  if (!data_layout) return ToStatus(data_layout.takeError(), "jit data layout");
  if (module->getDataLayout().isDefault()) module->setDataLayout(*data_layout);
  if (module->getTargetTriple().empty()) module->setTargetTriple(jtmb.getTargetTriple().str());

  // Compile on the creating thread (no compile threads): the tuner parallelises across
  // candidates, one JitModule per thread.
  auto jit = llvm::orc::LLJITBuilder()
                 .setJITTargetMachineBuilder(std::move(jtmb))
                 .setNumCompileThreads(0)
                 .create();
  if (!jit) return ToStatus(jit.takeError(), "cannot create llvm jit");

  // ORC reports materialisation failures (such as missing symbols) to the session's error
  // reporter, and returns only "failed to materialize" from lookup: keep the details.
  auto session_errors = std::make_shared<std::pair<std::mutex, std::string>>();
  (*jit)->getExecutionSession().setErrorReporter([session_errors](llvm::Error error) {
    std::string message = llvm::toString(std::move(error));
    std::lock_guard<std::mutex> lock(session_errors->first);
    if (!session_errors->second.empty()) session_errors->second += "; ";
    session_errors->second += message;
  });
  auto with_details = [session_errors](absl::Status status) {
    std::lock_guard<std::mutex> lock(session_errors->first);
    if (status.ok() || session_errors->second.empty()) return status;
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), " (", session_errors->second, ")"));
  };

  llvm::orc::MangleAndInterner mangle((*jit)->getExecutionSession(), (*jit)->getDataLayout());
  llvm::orc::SymbolMap symbols;
  for (const NamedSymbol& symbol : HostSymbols()) {
    symbols[mangle(symbol.name)] = llvm::JITEvaluatedSymbol(
        llvm::pointerToJITTargetAddress(symbol.address), llvm::JITSymbolFlags::Exported);
  }
  if (absl::Status status =
          ToStatus((*jit)->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(symbols))),
                   "jit runtime symbols");
      !status.ok()) {
    return status;
  }

  const std::string name = module->getName().str();
  std::vector<std::string> defined;
  for (const llvm::Function& fn : module->functions()) {
    if (!fn.isDeclaration() && !fn.hasLocalLinkage()) defined.push_back(fn.getName().str());
  }
  if (absl::Status status = ToStatus(
          (*jit)->addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(context))),
          absl::StrCat("cannot add module '", name, "' to the jit"));
      !status.ok()) {
    return status;
  }
  // Materialise everything now: unresolved symbols and codegen failures are reported here.
  for (const std::string& fn_name : defined) {
    auto address = (*jit)->lookup(fn_name);
    if (!address) {
      return with_details(
          ToStatus(address.takeError(),
                   absl::StrCat("cannot compile function '", fn_name, "' of module '", name, "'")));
    }
  }
  return std::unique_ptr<JitModule>(new JitModule(std::move(*jit)));
}

absl::StatusOr<void*> JitModule::Lookup(const std::string& name) const {
  auto address = jit_->lookup(name);
  if (!address) {
    std::string message = llvm::toString(address.takeError());
    return absl::NotFoundError(absl::StrCat("jit symbol '", name, "': ", message));
  }
  return reinterpret_cast<void*>(address->getAddress());
}

}  // namespace lathe::codegen
