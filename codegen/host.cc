// \file
// Host CPU detection for codegen/host.h.
#include "codegen/host.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Host.h"

namespace lathe::codegen {
namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return std::string(absl::StripAsciiWhitespace(line));
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(':', 1));
    if (absl::StripAsciiWhitespace(kv.first) == "model name") {
      std::string model(absl::StripAsciiWhitespace(kv.second));
      if (!model.empty()) return model;
    }
  }
  return llvm::sys::getHostCPUName().str();
}

// "32K", "1024K", "32M" as found in /sys/devices/system/cpu/cpu0/cache/index*/size.
int64_t ParseCacheSize(absl::string_view text) {
  int64_t scale = 1;
  if (absl::ConsumeSuffix(&text, "K"))
    scale = 1024;
  else if (absl::ConsumeSuffix(&text, "M"))
    scale = 1024 * 1024;
  else if (absl::ConsumeSuffix(&text, "G"))
    scale = int64_t{1024} * 1024 * 1024;
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0) return 0;
  return value * scale;
}

// Caches from sysfs (sysconf reports wrong L3 sizes on some virtual machines), then sysconf.
void DetectCaches(CpuInfo& info) {
  for (int index = 0; index < 8; ++index) {
    const std::string dir = absl::StrCat("/sys/devices/system/cpu/cpu0/cache/index", index, "/");
    const std::string level = ReadFirstLine(dir + "level");
    if (level.empty()) break;
    const std::string type = ReadFirstLine(dir + "type");
    if (type == "Instruction") continue;
    const int64_t size = ParseCacheSize(ReadFirstLine(dir + "size"));
    if (level == "1") info.l1d_bytes = size;
    if (level == "2") info.l2_bytes = size;
    if (level == "3") info.l3_bytes = size;
  }
  auto from_sysconf = [](int name) -> int64_t {
    const long value = sysconf(name);
    return value > 0 ? value : 0;
  };
  if (info.l1d_bytes == 0) info.l1d_bytes = from_sysconf(_SC_LEVEL1_DCACHE_SIZE);
  if (info.l2_bytes == 0) info.l2_bytes = from_sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (info.l3_bytes == 0) info.l3_bytes = from_sysconf(_SC_LEVEL3_CACHE_SIZE);
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

bool Has(const llvm::StringMap<bool>& features, const char* name) {
  auto it = features.find(name);
  return it != features.end() && it->getValue();
}

// Applies $LATHE_CPU_ISA to `features` (name -> enabled), or leaves them as they are and says
// why it cannot.
absl::Status ApplyIsaCap(llvm::StringMap<bool>& features) {
  const char* env = std::getenv(kCpuIsaEnv);
  const std::string cap = env == nullptr ? "" : absl::AsciiStrToLower(env);
  if (cap.empty() || cap == "host") return absl::OkStatus();
  if (cap != "avx2" && cap != "avx512") {
    return absl::InvalidArgumentError(
        absl::StrCat(kCpuIsaEnv, "=", env, ": expected host, avx2 or avx512"));
  }
  if (cap == "avx512" ? !Has(features, "avx512f")
                      : !(Has(features, "avx2") && Has(features, "fma"))) {
    return absl::InvalidArgumentError(
        absl::StrCat(kCpuIsaEnv, "=", env, ": this CPU (", CpuModelName(), ") has no ", cap));
  }
  if (cap == "avx2") {
    // Everything AVX-512 brings (its instructions, 32 registers, mask registers) and what
    // builds on it.
    for (auto& entry : features) {
      const llvm::StringRef name = entry.getKey();
      if (name.startswith("avx512") || name.startswith("amx") || name.startswith("avx10") ||
          name == "evex512") {
        entry.setValue(false);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status& IsaCapStatus() {
  static absl::Status* const status = new absl::Status();
  return *status;
}

CpuInfo Detect() {
  CpuInfo info;
  info.model = CpuModelName();
  info.llvm_cpu = llvm::sys::getHostCPUName().str();
  llvm::StringMap<bool> features;
  if (llvm::sys::getHostCPUFeatures(features)) {
    IsaCapStatus() = ApplyIsaCap(features);
    for (const auto& entry : features) {
      info.features.push_back(absl::StrCat(entry.getValue() ? "+" : "-", entry.getKey().str()));
    }
    std::sort(info.features.begin(), info.features.end());
  }
  auto has = [&features](const char* name) { return Has(features, name); };
#if defined(__x86_64__) || defined(__i386__)
  if (has("avx512f")) {
    info.isa = "avx512";
    info.vector_bits = 512;
  } else if (has("avx2")) {
    info.isa = "avx2";
    info.vector_bits = 256;
  } else if (has("avx")) {
    info.isa = "avx";
    info.vector_bits = 256;
  } else if (has("sse4.2")) {
    info.isa = "sse4.2";
    info.vector_bits = 128;
  } else {
    info.isa = "scalar";
    info.vector_bits = 128;
  }
#elif defined(__aarch64__)
  info.isa = "neon";
  info.vector_bits = 128;
#else
  info.isa = "scalar";
  info.vector_bits = 128;
#endif
  info.datapath_bits = info.vector_bits;
  if (info.vector_bits > 256 && info.llvm_cpu == "znver4") info.datapath_bits = 256;
  info.cores = UsableCores();
  DetectCaches(info);
  return info;
}

}  // namespace

const CpuInfo& HostCpu() {
  static const CpuInfo* const info = new CpuInfo(Detect());
  return *info;
}

absl::Status CheckCpuIsaCap() {
  HostCpu();  // detects (and checks) once
  return IsaCapStatus();
}

std::string HostFeatureString() { return absl::StrJoin(HostCpu().features, ","); }

std::string CpuDeviceClass(const CpuInfo& info) {
  std::vector<absl::string_view> words =
      absl::StrSplit(info.model, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  return absl::StrCat("cpu:", absl::StrJoin(words, " "), ":", info.isa, ":", info.cores, "c");
}

}  // namespace lathe::codegen
