#include "codegen/cuda/resources.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "codegen/cuda/nvrtc.h"

namespace lathe::codegen::cuda {

namespace {

// The integer just before `what` in `line` ("12 bytes spill stores" -> 12), or -1.
int64_t NumberBefore(absl::string_view line, absl::string_view what) {
  size_t at = line.find(what);
  if (at == absl::string_view::npos) return -1;
  size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  int64_t v;
  if (begin == end || !absl::SimpleAtoi(line.substr(begin, end - begin), &v)) return -1;
  return v;
}

// The quoted name after `prefix` ("Compiling entry function 'k'"), or empty.
std::string QuotedAfter(absl::string_view line, absl::string_view prefix) {
  size_t at = line.find(prefix);
  if (at == absl::string_view::npos) return "";
  size_t open = line.find('\'', at + prefix.size());
  size_t close = open == absl::string_view::npos ? open : line.find('\'', open + 1);
  if (close == absl::string_view::npos) return "";
  return std::string(line.substr(open + 1, close - open - 1));
}

int64_t RoundUp(int64_t v, int64_t unit) { return (v + unit - 1) / unit * unit; }

// Registers a block holds: the hardware allocates per warp, in units of 256.
int64_t RegistersPerBlock(int registers, int64_t threads) {
  int64_t warps = (threads + 31) / 32;
  return RoundUp(std::max(registers, 1) * int64_t{32}, 256) * warps;
}

}  // namespace

std::vector<KernelResources> ParsePtxasReport(const std::string& report) {
  std::vector<KernelResources> out;
  std::map<std::string, size_t> index;
  KernelResources* cur = nullptr;
  auto select = [&](const std::string& name) {
    auto it = index.find(name);
    if (it == index.end()) {
      it = index.emplace(name, out.size()).first;
      out.push_back({});
      out.back().name = name;
    }
    cur = &out[it->second];
  };
  for (absl::string_view line : absl::StrSplit(report, '\n')) {
    if (std::string n = QuotedAfter(line, "Compiling entry function"); !n.empty()) {
      select(n);
      continue;
    }
    if (size_t at = line.find("Function properties for "); at != absl::string_view::npos) {
      std::string n(absl::StripAsciiWhitespace(line.substr(at + 24)));
      if (!n.empty()) select(n);
      continue;
    }
    if (!cur) continue;
    if (int64_t v = NumberBefore(line, "bytes stack frame"); v >= 0) cur->stack_frame = v;
    if (int64_t v = NumberBefore(line, "bytes spill stores"); v >= 0) cur->spill_stores = v;
    if (int64_t v = NumberBefore(line, "bytes spill loads"); v >= 0) cur->spill_loads = v;
    if (int64_t v = NumberBefore(line, "registers"); v >= 0 && line.find("Used") != line.npos) {
      cur->registers = static_cast<int>(v);
    }
    if (int64_t v = NumberBefore(line, "barriers"); v >= 0) cur->barriers = static_cast<int>(v);
    if (int64_t v = NumberBefore(line, "bytes smem"); v >= 0) cur->shared_bytes = v;
  }
  return out;
}

absl::StatusOr<CompiledCubin> CompileToCubinWithResources(const std::string& source,
                                                          const std::string& arch) {
  auto t0 = std::chrono::steady_clock::now();
  std::string report;
  auto cubin = CompileToCubin(source, arch, &report);
  if (!cubin.ok()) return cubin.status();
  CompiledCubin out;
  out.cubin = std::move(*cubin);
  out.kernels = ParsePtxasReport(report);
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

absl::StatusOr<SmResources> SmResourcesFor(const std::string& arch) {
  auto digits = ParseArch(arch);
  if (!digits.ok()) return digits.status();
  int cc = std::atoi(digits->c_str());
  SmResources r;
  constexpr int64_t kKiB = 1024;
  auto set = [&](int64_t shared_kib, int64_t reserved, int threads, int blocks) {
    r.shared_bytes = shared_kib * kKiB;
    r.limits.max_shared_optin = (shared_kib - 1) * kKiB;
    r.reserved_shared_per_block = reserved;
    r.max_threads = threads;
    r.max_blocks = blocks;
  };
  if (cc == 70 || cc == 72) {
    set(96, 0, 2048, 32);
  } else if (cc == 75) {
    set(64, 0, 1024, 16);
  } else if (cc == 80 || cc == 87) {
    set(164, kKiB, cc == 80 ? 2048 : 1536, cc == 80 ? 32 : 16);
  } else if (cc == 86 || cc == 89 || cc >= 120) {
    set(100, kKiB, 1536, cc == 86 ? 16 : cc == 89 ? 24 : 32);
  } else {
    set(228, kKiB, 2048, 32);  // sm_90, sm_100 and what comes between
  }
  // Static __shared__ arrays (all lathe emits) are limited to 48 KiB per block everywhere.
  r.limits.max_shared_per_block = 48 * kKiB;
  return r;
}

Occupancy OccupancyOf(const SmResources& sm, int64_t threads, int registers, int64_t shared_bytes) {
  Occupancy o;
  if (threads < 1) return o;
  int64_t warps = (threads + 31) / 32;
  struct Limit {
    int64_t blocks;
    const char* what;
  };
  int64_t by_regs = sm.registers / RegistersPerBlock(registers, threads);
  int64_t by_shared = shared_bytes > 0
                          ? sm.shared_bytes / (shared_bytes + sm.reserved_shared_per_block)
                          : sm.max_blocks;
  int64_t by_threads = sm.max_threads / (warps * 32);
  Limit limits[] = {{by_regs, "registers"},
                    {by_shared, "shared memory"},
                    {by_threads, "threads"},
                    {sm.max_blocks, "blocks"}};
  Limit best = limits[3];
  for (const Limit& l : limits) {
    if (l.blocks < best.blocks) best = l;
  }
  o.blocks_per_sm = static_cast<int>(std::max<int64_t>(best.blocks, 0));
  o.limited_by = best.what;
  return o;
}

absl::Status CheckKernelResources(const LaunchPlan& plan,
                                  const std::vector<KernelResources>& resources,
                                  const SmResources& sm) {
  for (const KernelLaunch& k : plan.kernels) {
    auto it = std::find_if(resources.begin(), resources.end(),
                           [&](const KernelResources& r) { return r.name == k.name; });
    if (it == resources.end()) {
      return absl::InvalidArgumentError("ptxas reported nothing for kernel '" + k.name + "'");
    }
    const KernelResources& r = *it;
    int64_t threads = k.threads_per_block();
    if (r.registers > sm.limits.max_regs_per_thread) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "kernel '", k.name, "' uses ", r.registers,
          " registers per thread (ptxas); the device allows ", sm.limits.max_regs_per_thread));
    }
    int64_t per_block = RegistersPerBlock(r.registers, threads);
    if (per_block > sm.limits.max_regs_per_block) {
      return absl::ResourceExhaustedError(
          absl::StrCat("kernel '", k.name, "' uses ", r.registers,
                       " registers per thread (ptxas) x ", threads, " threads = ", per_block,
                       " registers per block; the device has ", sm.limits.max_regs_per_block));
    }
    if (r.shared_bytes > sm.limits.max_shared_per_block) {
      return absl::ResourceExhaustedError(
          absl::StrCat("kernel '", k.name, "' uses ", r.shared_bytes,
                       " bytes of static shared memory (ptxas); the device allows ",
                       sm.limits.max_shared_per_block, " per block"));
    }
    const int64_t shared = r.shared_bytes + k.dynamic_shared_bytes;
    if (k.dynamic_shared_bytes > 0 && shared > sm.limits.max_shared_optin) {
      return absl::ResourceExhaustedError(
          absl::StrCat("kernel '", k.name, "' uses ", shared, " bytes of shared memory (",
                       k.dynamic_shared_bytes, " dynamic); the device allows ",
                       sm.limits.max_shared_optin, " per block with the opt-in"));
    }
    if (OccupancyOf(sm, threads, r.registers, shared).blocks_per_sm < 1) {
      return absl::ResourceExhaustedError(
          absl::StrCat("kernel '", k.name, "' (", threads, " threads, ", r.registers,
                       " registers, ", shared, " bytes shared, ptxas) does not fit on one SM"));
    }
  }
  return absl::OkStatus();
}

std::string ResourcesText(const LaunchPlan& plan, const std::vector<KernelResources>& resources,
                          const SmResources& sm) {
  std::string out;
  for (const KernelLaunch& k : plan.kernels) {
    auto it = std::find_if(resources.begin(), resources.end(),
                           [&](const KernelResources& r) { return r.name == k.name; });
    if (it == resources.end()) continue;
    const int64_t shared = it->shared_bytes + k.dynamic_shared_bytes;
    Occupancy o = OccupancyOf(sm, k.threads_per_block(), it->registers, shared);
    absl::StrAppend(&out, out.empty() ? "" : "; ", k.name, ": ", k.threads_per_block(),
                    " threads, ", it->registers, " registers, ", it->spill_stores + it->spill_loads,
                    " bytes spilled, ", shared, " bytes shared, ", o.blocks_per_sm, " blocks/SM (",
                    o.limited_by, ")");
  }
  return out;
}

}  // namespace lathe::codegen::cuda
