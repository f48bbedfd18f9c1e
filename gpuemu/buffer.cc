#include "gpuemu/buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace lathe::gpuemu {

namespace {

constexpr unsigned char kCanary = 0xff;  // four of them are a NaN

struct Registered {
  const EmuBuffer* buffer;
  uintptr_t map_lo, map_hi;  // the whole mapping, guard pages included
};

std::mutex& RegistryMutex() {
  static std::mutex* m = new std::mutex;
  return *m;
}
std::map<uintptr_t, Registered>& Registry() {
  static auto* r = new std::map<uintptr_t, Registered>;
  return *r;
}

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// Inaccessible bytes on each side of a buffer: an index off by up to 16K elements faults.
size_t GuardBytes() { return std::max<size_t>(PageSize(), 64 * 1024); }

// Faults this far from a buffer are still named after it (the nearest one).
constexpr uintptr_t kNearBytes = 64 << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<EmuBuffer>> EmuBuffer::Allocate(int64_t bytes, std::string name) {
  if (bytes < 0)
    return absl::InvalidArgumentError(absl::StrCat("buffer '", name, "' of ", bytes, " bytes"));
  const size_t page = PageSize();
  const size_t rounded = (static_cast<size_t>(bytes) + 15) / 16 * 16;
  const size_t body = (rounded + page - 1) / page * page;
  std::unique_ptr<EmuBuffer> b(new EmuBuffer);
  const size_t guard = GuardBytes();
  b->map_bytes_ = body + 2 * guard;
  void* m = mmap(nullptr, b->map_bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("emulated buffer '", name, "' of ", bytes,
                                                     " bytes: mmap: ", std::strerror(errno)));
  }
  b->map_ = static_cast<char*>(m);
  b->lo_ = b->map_ + guard;
  b->hi_ = b->lo_ + body;
  if (body > 0 && mprotect(b->lo_, body, PROT_READ | PROT_WRITE) != 0) {
    return absl::InternalError(absl::StrCat("mprotect: ", std::strerror(errno)));
  }
  b->data_ = b->hi_ - rounded;
  b->bytes_ = bytes;
  b->name_ = std::move(name);
  std::memset(b->lo_, kCanary, body);
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry()[reinterpret_cast<uintptr_t>(b->map_)] = {
      b.get(), reinterpret_cast<uintptr_t>(b->map_),
      reinterpret_cast<uintptr_t>(b->map_ + b->map_bytes_)};
  return b;
}

EmuBuffer::~EmuBuffer() {
  if (!map_) return;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    Registry().erase(reinterpret_cast<uintptr_t>(map_));
  }
  munmap(map_, map_bytes_);
}

void EmuBuffer::set_name(std::string name) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  name_ = std::move(name);
}

void EmuBuffer::Fill32(uint32_t value) {
  for (int64_t i = 0; i + 4 <= bytes_; i += 4) std::memcpy(data_ + i, &value, 4);
}

absl::Status EmuBuffer::CheckCanaries() {
  auto bad = [&](char* from, char* to) -> char* {
    for (char* p = from; p < to; ++p) {
      if (static_cast<unsigned char>(*p) != kCanary) return p;
    }
    return nullptr;
  };
  char* end = data_ + bytes_;
  char* p = bad(lo_, data_);
  char* q = bad(end, hi_);
  if (!p && !q) return absl::OkStatus();
  char* at = p ? p : q;
  int64_t offset = at - data_;
  int64_t element = offset >= 0 ? offset / 4 : -((-offset + 3) / 4);
  std::memset(lo_, kCanary, static_cast<size_t>(data_ - lo_));
  std::memset(end, kCanary, static_cast<size_t>(hi_ - end));
  return absl::AbortedError(absl::StrCat("illegal address: out-of-bounds write to element ",
                                         element, " of buffer '", name_, "' (", bytes_ / 4,
                                         " elements): ", p ? "before its start" : "past its end"));
}

std::string DescribeAddress(uintptr_t address) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  // The buffer whose mapping holds the address, else the nearest one.
  const EmuBuffer* best = nullptr;
  uintptr_t best_distance = kNearBytes;
  for (const auto& [lo, r] : Registry()) {
    uintptr_t d = address < r.map_lo    ? r.map_lo - address
                  : address >= r.map_hi ? address - r.map_hi + 1
                                        : 0;
    if (d < best_distance || (d == 0 && !best)) {
      best = r.buffer;
      best_distance = d;
    }
  }
  if (!best) return absl::StrCat("address 0x", absl::Hex(address), ", in no buffer");
  intptr_t offset = static_cast<intptr_t>(address) -
                    reinterpret_cast<intptr_t>(reinterpret_cast<const char*>(best->data()));
  int64_t element = offset >= 0 ? offset / 4 : -((-offset + 3) / 4);
  return absl::StrCat("element ", element, " of buffer '", best->name(), "' (", best->bytes() / 4,
                      " elements): ", offset < 0 ? "before its start" : "past its end");
}

}  // namespace lathe::gpuemu
