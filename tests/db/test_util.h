// \file
// Helpers shared by the lathe::db tests: a temporary directory, record factories, raw file
// access.
#ifndef LATHE_TESTS_DB_TEST_UTIL_H_
#define LATHE_TESTS_DB_TEST_UTIL_H_

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "db/record.h"

namespace lathe::db::testing {

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "lathe_db_test.XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    path_ = made != nullptr ? made : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// An ok record for workload `w` (key "key-<w>") on `device_class` with the given median.
inline Record MakeRecord(const std::string& candidate_id, const std::string& w,
                         const std::string& device_class, double median_us,
                         ErrorClass error_class = ErrorClass::kOk) {
  Record r;
  r.candidate_id = candidate_id;
  r.workload = "matmul:k=" + w + ",m=64,n=64";
  r.workload_key = "key-" + w;
  r.device_class = device_class;
  r.trace_json = "{\"trace\":\"" + candidate_id + "\"}";
  if (error_class == ErrorClass::kOk) {
    r.repeats_us = {median_us * 0.99, median_us, median_us * 1.02};
    r.median_us = median_us;
    r.cv = CoefficientOfVariation(r.repeats_us);
  }
  r.flops = 2.0 * 64 * 64 * 64;
  r.error_class = error_class;
  r.error_msg = error_class == ErrorClass::kOk ? "" : "failed";
  r.worker = "worker-1";
  r.lathe_version = "0.1.0";
  r.measured_at_ms = 1700000000000;
  return r;
}

// Equality of everything a caller stores (the database assigns id and inserted_at).
inline bool SameContent(Record a, Record b) {
  a.id = b.id = 0;
  a.inserted_at_ms = b.inserted_at_ms = 0;
  return a == b;
}

}  // namespace lathe::db::testing

#endif  // LATHE_TESTS_DB_TEST_UTIL_H_
