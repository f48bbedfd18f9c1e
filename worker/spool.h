// \file
// The worker's spool: results that could not be reported (the daemon was away) kept on local
// disk until it is back. An append-only file `<dir>/results.spool` of records, each a 4-byte
// little-endian length, a 4-byte FNV-1a checksum of the body and the body: a serialized
// ReportRequest (the results of one lease with its lease id and device class). Every append
// is fsync'd before it returns. A torn or damaged tail (a crash during an append) is ignored
// when reading. Resending is safe because Report is idempotent by candidate id.
//
// Thread-safety: all methods may be called from any thread.
#ifndef LATHE_WORKER_SPOOL_H_
#define LATHE_WORKER_SPOOL_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lathe/v1/service.pb.h"

namespace lathe::worker {

class Spool {
 public:
  // Creates `dir` when missing and opens (or creates) the spool file in it. FailedPrecondition
  // when another process holds the spool.
  static absl::StatusOr<std::unique_ptr<Spool>> Open(const std::string& dir);
  ~Spool();
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  // Appends one batch and fsyncs it.
  absl::Status Append(const lathe::v1::ReportRequest& batch);

  // Every intact batch in the file, oldest first, and the file offset they end at (pass it to
  // DropThrough once they were all delivered).
  struct Contents {
    std::vector<lathe::v1::ReportRequest> batches;
    int64_t end = 0;
  };
  absl::StatusOr<Contents> ReadAll() const;

  // Forgets the batches before `end` and keeps whatever was appended after it (atomically:
  // rewrite to a temporary file, fsync, rename).
  absl::Status DropThrough(int64_t end);

  // True when no batch is waiting (cheap: the file size).
  bool Empty() const;

  const std::string& path() const { return path_; }

 private:
  explicit Spool(std::string dir, std::string path)
      : dir_(std::move(dir)), path_(std::move(path)) {}
  absl::Status Reopen();

  std::string dir_, path_;
  mutable std::mutex mu_;
  int fd_ = -1;       // O_APPEND
  int lock_fd_ = -1;  // `<dir>/lock`, flock'd: one worker per spool
};

}  // namespace lathe::worker

#endif  // LATHE_WORKER_SPOOL_H_
