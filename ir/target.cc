#include "ir/target.h"

#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lathe::ir {

namespace {

constexpr const char* kForms = "cpu, cuda, cuda:N, cuda:sm_XX or cuda-emu:sm_XX";

bool Digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

}  // namespace

bool IsCudaArch(const std::string& text) {
  if (!absl::StartsWith(text, "sm_")) return false;
  std::string arch = text.substr(3);
  if (!arch.empty() && (arch.back() == 'a' || arch.back() == 'f')) arch.pop_back();
  if (arch.size() < 2 || arch.size() > 3) return false;
  for (char c : arch) {
    if (!Digit(c)) return false;
  }
  return true;
}

std::string Target::ToString() const {
  switch (kind) {
    case TargetKind::kCpu:
      return "cpu";
    case TargetKind::kCudaEmu:
      return "cuda-emu:" + arch;
    case TargetKind::kCuda:
      return ordinal >= 0 ? absl::StrCat("cuda:", ordinal) : "cuda:" + arch;
  }
  return "cpu";
}

Target Target::Built() const {
  if (kind != TargetKind::kCudaEmu) return *this;
  Target t = *this;
  t.kind = TargetKind::kCuda;
  return t;
}

absl::StatusOr<Target> ParseTarget(const std::string& text) {
  Target t;
  if (text == "cpu") return t;
  if (text == "cuda") {
    t.kind = TargetKind::kCuda;
    t.ordinal = 0;
    return t;
  }
  if (absl::StartsWith(text, "cuda-emu:")) {
    const std::string rest = text.substr(9);
    if (IsCudaArch(rest)) {
      t.kind = TargetKind::kCudaEmu;
      t.arch = rest;
      return t;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "target '", text, "': the emulator needs an architecture (cuda-emu:sm_XX, e.g. sm_90)"));
  }
  if (absl::StartsWith(text, "cuda:")) {
    const std::string rest = text.substr(5);
    t.kind = TargetKind::kCuda;
    if (IsCudaArch(rest)) {
      t.arch = rest;
      return t;
    }
    int ordinal = -1;
    if (!rest.empty() && Digit(rest[0]) && absl::SimpleAtoi(rest, &ordinal) && ordinal >= 0) {
      t.ordinal = ordinal;
      return t;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("target '", text, "': expected cuda:N (a GPU's ordinal) or cuda:sm_XX"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown target '", text, "' (expected ", kForms, ")"));
}

absl::StatusOr<TargetKind> DeviceClassKind(const std::string& device_class) {
  if (absl::StartsWith(device_class, "cpu:")) return TargetKind::kCpu;
  if (absl::StartsWith(device_class, "cuda-emu:")) return TargetKind::kCudaEmu;
  if (absl::StartsWith(device_class, "cuda:")) return TargetKind::kCuda;
  return absl::InvalidArgumentError(absl::StrCat(
      "device class '", device_class, "' is none of cpu:..., cuda:... or cuda-emu:sm_XX"));
}

absl::StatusOr<Target> TargetOfDeviceClass(const std::string& device_class) {
  absl::StatusOr<TargetKind> kind = DeviceClassKind(device_class);
  if (!kind.ok()) return kind.status();
  switch (*kind) {
    case TargetKind::kCpu:
      return Target{};
    case TargetKind::kCudaEmu:
      return ParseTarget(device_class);
    case TargetKind::kCuda:
      break;
  }
  const size_t open = device_class.rfind("(sm_");
  const size_t close = device_class.rfind(')');
  if (open != std::string::npos && close != std::string::npos && close > open &&
      IsCudaArch(device_class.substr(open + 1, close - open - 1))) {
    Target t;
    t.kind = TargetKind::kCuda;
    t.arch = std::string(device_class.substr(open + 1, close - open - 1));
    return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("device class '", device_class,
                                                 "' names no architecture (cuda:<name> (sm_XX))"));
}

}  // namespace lathe::ir
