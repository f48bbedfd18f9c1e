#include "gpuemu/program.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace lathe::gpuemu {

std::vector<KernelSignature> Signatures(const codegen::cuda::LaunchPlan& plan) {
  std::vector<KernelSignature> out;
  for (const codegen::cuda::KernelLaunch& k : plan.kernels) {
    out.push_back({k.name, static_cast<int>(k.args.size())});
  }
  return out;
}

absl::StatusOr<std::unique_ptr<EmuProgram>> EmuProgram::Build(
    const codegen::cuda::CudaSource& src) {
  auto m = EmuModule::Build(src.source, Signatures(src.plan));
  if (!m.ok()) return m.status();
  return FromModule(src.plan, std::move(*m));
}

absl::StatusOr<std::unique_ptr<EmuProgram>> EmuProgram::FromModule(
    codegen::cuda::LaunchPlan plan, std::shared_ptr<EmuModule> module) {
  std::unique_ptr<EmuProgram> p(new EmuProgram);
  p->plan_ = std::move(plan);
  p->module_ = std::move(module);
  for (const codegen::cuda::TempBuffer& t : p->plan_.temporaries) {
    auto b = EmuBuffer::Allocate(t.bytes, t.name);
    if (!b.ok()) return b.status();
    p->temps_.push_back(std::move(*b));
  }
  return p;
}

absl::Status EmuProgram::Run(const std::vector<EmuBuffer*>& args) {
  if (args.size() != plan_.args.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "program '", plan_.name, "' takes ", plan_.args.size(), " arguments, got ", args.size()));
  }
  std::vector<float*> ptrs;
  for (size_t i = 0; i < args.size(); ++i) {
    args[i]->set_name(plan_.args[i]);
    ptrs.push_back(args[i]->data());
  }
  return RunAt(ptrs, args);
}

absl::Status EmuProgram::RunAt(const std::vector<float*>& args,
                               const std::vector<EmuBuffer*>& check) {
  if (args.size() != plan_.args.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "program '", plan_.name, "' takes ", plan_.args.size(), " arguments, got ", args.size()));
  }
  std::map<std::string, float*> by_name;
  for (size_t i = 0; i < args.size(); ++i) by_name[plan_.args[i]] = args[i];
  std::vector<EmuBuffer*> checked = check;
  for (size_t i = 0; i < temps_.size(); ++i) {
    temps_[i]->Fill32(0xffffffffu);
    by_name[plan_.temporaries[i].name] = temps_[i]->data();
    checked.push_back(temps_[i].get());
  }
  for (const codegen::cuda::KernelLaunch& k : plan_.kernels) {
    std::vector<float*> ptrs;
    for (const std::string& a : k.args) {
      auto it = by_name.find(a);
      if (it == by_name.end()) {
        return absl::InternalError(
            absl::StrCat("kernel '", k.name, "' reads unknown buffer '", a, "'"));
      }
      ptrs.push_back(it->second);
    }
    if (auto st = module_->Launch(k.name, k.grid, k.block, ptrs); !st.ok()) return st;
    for (EmuBuffer* b : checked) {
      if (auto st = b->CheckCanaries(); !st.ok()) {
        return absl::AbortedError(absl::StrCat("kernel '", k.name, "': ", st.message()));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace lathe::gpuemu
