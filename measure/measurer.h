// \file
// The sandboxed measurer: candidates are built, checked against the reference and timed in
// a child process that this object spawned (posix_spawn of the `lathe-measure` binary, never
// a fork of the calling, possibly threaded, process). The parent owns the deadline: a child
// that hangs is killed with its whole process group, a child that crashes is replaced, and
// the candidate is classified (timeout, runtime_error) instead of taking the caller down.
//
// Thread-safety: one Measurer serves one caller at a time; use one per measuring thread.
#ifndef LATHE_MEASURE_MEASURER_H_
#define LATHE_MEASURE_MEASURER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/trace.h"
#include "lathe/v1/measure.pb.h"

namespace lathe::measure {

struct MeasurerOptions {
  // The child binary; empty: `lathe-measure` next to this executable, or $LATHE_MEASURE_BIN.
  std::string child_path;
  // Deadline of one candidate (build, check and timing together).
  double timeout_s = 60;
  // Extra environment entries for the child ("NAME=value").
  std::vector<std::string> child_env;
  // The GPU (ordinal) that this measurer's child measures cuda candidates on; one Measurer
  // per GPU.
  int gpu_ordinal = 0;
  // Non-empty ("sm_90"): cuda candidates are run on the GPU emulator for this architecture
  // instead (the `cuda-emu:sm_XX` device), no GPU needed.
  std::string emulated_arch;
};

class Measurer {
 public:
  // Spawns the first child. Fails when the child binary cannot be found or started.
  static absl::StatusOr<std::unique_ptr<Measurer>> Create(MeasurerOptions options = {});
  ~Measurer();
  Measurer(const Measurer&) = delete;
  Measurer& operator=(const Measurer&) = delete;

  // Measures one candidate: the child receives the request with its trace as a message
  // (`trace`, the workload named once), whichever form `request` carries. Every outcome of the
  // candidate itself is a result with an error class; a non-OK status only means the sandbox could
  // not run at all: no child could be started, or (FailedPrecondition, naming the GPU and why) a
  // cuda candidate was asked for where there is no CUDA driver or no such GPU. A cuda candidate
  // that ends in a runtime error (a sticky CUDA error poisons the child's context) replaces the
  // child, so later candidates are unaffected.
  absl::StatusOr<lathe::v1::MeasureResult> Measure(const lathe::v1::MeasureRequest& request);

  // How many times a child was replaced after a crash or timeout.
  int restarts() const { return restarts_; }

 private:
  explicit Measurer(MeasurerOptions options) : options_(std::move(options)) {}
  absl::Status Spawn();
  void Kill();

  MeasurerOptions options_;
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  int restarts_ = 0;
};

// Finds the measurement child binary as MeasurerOptions documents.
absl::StatusOr<std::string> FindMeasureChild();

// Framing shared by both ends: a 4-byte little-endian length, then the serialized message.
// ReadFrame waits at most `timeout_ms` (< 0: forever); DeadlineExceeded on timeout,
// Unavailable when the peer closed the pipe.
absl::Status WriteFrame(int fd, const std::string& bytes);
absl::StatusOr<std::string> ReadFrame(int fd, int timeout_ms);

}  // namespace lathe::measure

#endif  // LATHE_MEASURE_MEASURER_H_
