// \file
// Emulated global memory: a buffer placed between two inaccessible guard pages, its end as
// close to the second as 16-byte alignment allows (its start is 16-byte aligned, as a
// float4 access needs), the few bytes between it and the guards filled with NaN bytes.
// A kernel that reads or writes past the end or far before the start faults on a guard page,
// which the runtime reports as the illegal address a GPU would raise, naming the buffer and
// the element; a write into the NaN bytes is found when the launch ends (CheckCanaries); a
// read of them yields NaN, which fails the output check.
//
// Every live buffer is registered (by address) so that a fault address can be named.
//
// Thread-safety: a buffer is used by one launch at a time; the registry is synchronized.
#ifndef LATHE_GPUEMU_BUFFER_H_
#define LATHE_GPUEMU_BUFFER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lathe::gpuemu {

class EmuBuffer {
 public:
  // A buffer of `bytes` (0 allowed), filled with NaN bytes; `name` names it in reports.
  static absl::StatusOr<std::unique_ptr<EmuBuffer>> Allocate(int64_t bytes, std::string name);
  ~EmuBuffer();
  EmuBuffer(const EmuBuffer&) = delete;
  EmuBuffer& operator=(const EmuBuffer&) = delete;

  float* data() { return reinterpret_cast<float*>(data_); }
  const float* data() const { return reinterpret_cast<const float*>(data_); }
  int64_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }
  void set_name(std::string name);

  // Fills the whole buffer with a 32-bit pattern (e.g. the bits of a NaN).
  void Fill32(uint32_t value);
  // Whether the bytes between the buffer and its guard pages are still NaN bytes; Aborted
  // naming the buffer and the first element written out of bounds otherwise (and refills).
  absl::Status CheckCanaries();

 private:
  EmuBuffer() = default;
  char* map_ = nullptr;  // the whole mapping: guard, slack, data, slack, guard
  size_t map_bytes_ = 0;
  char* data_ = nullptr;
  int64_t bytes_ = 0;
  char* lo_ = nullptr;  // first accessible byte (after the first guard page)
  char* hi_ = nullptr;  // one past the last accessible byte (the second guard page)
  std::string name_;
};

// What a fault address is, relative to the registered buffers: "element 1024 of buffer 'C'
// (1024 elements, 4 bytes each): past its end" or "an address in no buffer". Safe to call
// from a signal handler's deferred report (not from the handler itself: it allocates).
std::string DescribeAddress(uintptr_t address);

}  // namespace lathe::gpuemu

#endif  // LATHE_GPUEMU_BUFFER_H_
