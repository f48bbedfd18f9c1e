#include "worker/spool.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace lathe::worker {

namespace {

std::string Errno(const std::string& what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

uint32_t Fnv1a(const std::string& bytes) {
  uint32_t h = 2166136261u;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

absl::Status WriteAll(int fd, const std::string& bytes, const std::string& path) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t w = write(fd, bytes.data() + off, bytes.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return absl::InternalError(Errno("write " + path));
    off += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::string();
    return absl::InternalError(Errno("open " + path));
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return absl::InternalError(Errno("read " + path));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

void FsyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Spool>> Spool::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("create spool directory ", dir, ": ", ec.message()));
  std::unique_ptr<Spool> s(new Spool(dir, dir + "/results.spool"));
  std::string lock = dir + "/lock";
  s->lock_fd_ = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (s->lock_fd_ < 0) return absl::InternalError(Errno("open " + lock));
  if (flock(s->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "spool ", dir, " is in use by another lathe-worker; give each worker its own --spool"));
  }
  if (auto st = s->Reopen(); !st.ok()) return st;
  // A torn tail (a crash during an append) is cut off, so later appends stay readable.
  auto contents = s->ReadAll();
  if (!contents.ok()) return contents.status();
  struct stat sb;
  if (stat(s->path_.c_str(), &sb) == 0 && sb.st_size > contents->end &&
      truncate(s->path_.c_str(), contents->end) != 0) {
    return absl::InternalError(Errno("truncate " + s->path_));
  }
  return s;
}

Spool::~Spool() {
  if (fd_ >= 0) close(fd_);
  if (lock_fd_ >= 0) close(lock_fd_);
}

absl::Status Spool::Reopen() {
  if (fd_ >= 0) close(fd_);
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) return absl::InternalError(Errno("open spool " + path_));
  return absl::OkStatus();
}

absl::Status Spool::Append(const lathe::v1::ReportRequest& batch) {
  std::string body;
  if (!batch.SerializeToString(&body)) return absl::InternalError("serialize spooled batch");
  std::string rec;
  PutU32(rec, static_cast<uint32_t>(body.size()));
  PutU32(rec, Fnv1a(body));
  rec += body;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto st = WriteAll(fd_, rec, path_); !st.ok()) return st;
  if (fsync(fd_) != 0) return absl::InternalError(Errno("fsync " + path_));
  return absl::OkStatus();
}

absl::StatusOr<Spool::Contents> Spool::ReadAll() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto bytes = ReadFile(path_);
  if (!bytes.ok()) return bytes.status();
  Contents c;
  size_t off = 0;
  while (off + 8 <= bytes->size()) {
    uint32_t len = GetU32(bytes->data() + off);
    uint32_t sum = GetU32(bytes->data() + off + 4);
    if (off + 8 + len > bytes->size()) break;  // torn tail
    std::string body = bytes->substr(off + 8, len);
    if (Fnv1a(body) != sum) break;  // damaged: nothing after it can be trusted
    lathe::v1::ReportRequest r;
    if (!r.ParseFromString(body)) break;
    c.batches.push_back(std::move(r));
    off += 8 + len;
  }
  c.end = static_cast<int64_t>(off);
  return c;
}

absl::Status Spool::DropThrough(int64_t end) {
  std::lock_guard<std::mutex> lock(mu_);
  auto bytes = ReadFile(path_);
  if (!bytes.ok()) return bytes.status();
  std::string rest =
      end < static_cast<int64_t>(bytes->size()) ? bytes->substr(static_cast<size_t>(end)) : "";
  std::string tmp = path_ + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(Errno("open " + tmp));
  absl::Status st = WriteAll(fd, rest, tmp);
  if (st.ok() && fsync(fd) != 0) st = absl::InternalError(Errno("fsync " + tmp));
  close(fd);
  if (!st.ok()) return st;
  if (rename(tmp.c_str(), path_.c_str()) != 0) return absl::InternalError(Errno("rename " + tmp));
  FsyncDir(dir_);
  return Reopen();
}

bool Spool::Empty() const {
  struct stat sb;
  if (stat(path_.c_str(), &sb) != 0) return true;
  return sb.st_size == 0;
}

}  // namespace lathe::worker
