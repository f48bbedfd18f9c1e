// Benchmark of the tuning database (lathe::db): insert throughput with synchronous=FULL in
// WAL mode, batched per measurement round, and best-record query latency on a large file.
//
//   db_bench [--records N] [--db PATH] [--keep]
//
// Prints one figure per line. The default fills 1,000,000 records (≈ 0.5 GB, ~30 s).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/lookup.h"

namespace {

using Clock = std::chrono::steady_clock;
using lathe::db::Database;
using lathe::db::Record;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

constexpr int kWorkloads = 1000;
constexpr int kDeviceClasses = 2;

std::string DeviceClass(int d) {
  return "cpu:Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz:avx512:" + std::to_string(2 << d) + "c";
}

Record MakeRecord(int64_t n, std::mt19937_64& rng) {
  Record r;
  int w = static_cast<int>(rng() % kWorkloads);
  int d = static_cast<int>(rng() % kDeviceClasses);
  r.candidate_id = "bench-" + std::to_string(n);
  r.workload = "matmul:epilogue=none,k=" + std::to_string(64 + w) + ",m=512,n=512";
  r.workload_key = "wkey" + std::to_string(w);
  r.device_class = DeviceClass(d);
  // A realistic trace: ~10 primitives of JSON.
  r.trace_json = "{\"version\":1,\"workload\":\"" + r.workload + "\",\"instructions\":[";
  for (int i = 0; i < 10; ++i) {
    r.trace_json += std::string(i ? "," : "") +
                    "{\"kind\":\"split\",\"stage\":\"C\",\"loops\":[\"i" + std::to_string(i) +
                    "\"],\"factors\":[" + std::to_string(1 + rng() % 64) + "]}";
  }
  r.trace_json += "]}";
  double base = 100 + static_cast<double>(rng() % 100000) / 10;
  for (int i = 0; i < 10; ++i) r.repeats_us.push_back(base * (1 + (rng() % 100) / 5000.0));
  r.median_us = lathe::db::Median(r.repeats_us);
  r.cv = lathe::db::CoefficientOfVariation(r.repeats_us);
  r.flops = 2.0 * 512 * 512 * (64 + w);
  r.error_class =
      rng() % 10 == 0 ? lathe::db::ErrorClass::kCompileError : lathe::db::ErrorClass::kOk;
  if (r.error_class != lathe::db::ErrorClass::kOk) {
    r.repeats_us.clear();
    r.median_us = 0;
    r.cv = 0;
    r.error_msg = "compile error: something went wrong";
  }
  r.worker = "bench-worker";
  r.lathe_version = "0.1.0";
  r.measured_at_ms = 1700000000000 + n;
  return r;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "db_bench: %s\n", std::string(st.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t total = 1000000;
  std::string path;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--records" && i + 1 < argc) {
      total = std::atoll(argv[++i]);
    } else if (a == "--db" && i + 1 < argc) {
      path = argv[++i];
    } else if (a == "--keep") {
      keep = true;
    } else {
      std::fprintf(stderr, "usage: db_bench [--records N] [--db PATH] [--keep]\n");
      return 2;
    }
  }
  if (path.empty()) {
    path = (std::filesystem::temp_directory_path() /
            ("lathe_db_bench_" + std::to_string(::getpid()) + ".db"))
               .string();
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  std::mt19937_64 rng(1);
  std::printf("db_bench: %s, %lld records, sqlite WAL, synchronous=FULL\n", path.c_str(),
              static_cast<long long>(total));

  int64_t n = 0;
  {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path);
    if (!db.ok()) return Fail(db.status());

    // 1. Insert throughput, one transaction per measurement round of 64 records.
    for (int batch : {1, 64}) {
      int rounds = 300;
      std::vector<double> commit_ms;
      auto t0 = Clock::now();
      for (int r = 0; r < rounds; ++r) {
        std::vector<Record> recs;
        for (int i = 0; i < batch; ++i) recs.push_back(MakeRecord(n++, rng));
        auto c0 = Clock::now();
        absl::StatusOr<std::vector<lathe::db::InsertResult>> res = (*db)->InsertBatch(recs);
        commit_ms.push_back(Seconds(c0, Clock::now()) * 1e3);
        if (!res.ok()) return Fail(res.status());
      }
      double s = Seconds(t0, Clock::now());
      std::printf(
          "insert, %2d records/transaction: %8.0f records/s, %6.0f transactions/s, "
          "transaction p50 %.2f ms, p99 %.2f ms\n",
          batch, rounds * batch / s, rounds / s, Percentile(commit_ms, 0.5),
          Percentile(commit_ms, 0.99));
    }

    // 2. Fill to `total` records in large transactions.
    auto t0 = Clock::now();
    int64_t before = n;
    while (n < total) {
      std::vector<Record> recs;
      for (int i = 0; i < 10000 && n < total; ++i) recs.push_back(MakeRecord(n++, rng));
      absl::StatusOr<std::vector<lathe::db::InsertResult>> res = (*db)->InsertBatch(recs);
      if (!res.ok()) return Fail(res.status());
    }
    double s = Seconds(t0, Clock::now());
    std::printf("fill to %lld records (10,000/transaction): %.1f s, %.0f records/s\n",
                static_cast<long long>(total), s, (n - before) / s);
  }
  std::printf("file size: %.0f MB\n", std::filesystem::file_size(path) / 1e6 +
                                          (std::filesystem::exists(path + "-wal")
                                               ? std::filesystem::file_size(path + "-wal") / 1e6
                                               : 0));

  // 3. Queries on the full file (fresh connection).
  auto o0 = Clock::now();
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path);
  if (!db.ok()) return Fail(db.status());
  std::printf("open (no quick_check): %.2f ms\n", Seconds(o0, Clock::now()) * 1e3);

  constexpr int kQueries = 20000;
  std::vector<double> best_us, top_us, lookup_us;
  int hits = 0;
  for (int q = 0; q < kQueries; ++q) {
    int w = static_cast<int>(rng() % kWorkloads);
    std::string key = "wkey" + std::to_string(w);
    std::string dc = DeviceClass(static_cast<int>(rng() % kDeviceClasses));
    auto a = Clock::now();
    absl::StatusOr<std::optional<Record>> best = (*db)->Best(key, dc);
    auto b = Clock::now();
    if (!best.ok()) return Fail(best.status());
    hits += best->has_value();
    best_us.push_back(Seconds(a, b) * 1e6);
    if (q % 4 == 0) {
      a = Clock::now();
      absl::StatusOr<std::vector<Record>> top = (*db)->TopK(key, dc, 10);
      b = Clock::now();
      if (!top.ok()) return Fail(top.status());
      top_us.push_back(Seconds(a, b) * 1e6);
      lathe::db::WorkloadRef ref{
          "matmul:epilogue=none,k=" + std::to_string(64 + w) + ",m=512,n=512", key};
      a = Clock::now();
      absl::StatusOr<lathe::db::LookupResult> lr = lathe::db::Lookup(**db, ref, dc);
      b = Clock::now();
      if (!lr.ok()) return Fail(lr.status());
      lookup_us.push_back(Seconds(a, b) * 1e6);
    }
  }
  auto report = [](const char* what, const std::vector<double>& v) {
    double mean = 0;
    for (double x : v) mean += x;
    mean /= v.size();
    std::printf("%-34s mean %7.1f us, p50 %7.1f us, p99 %7.1f us (%zu queries)\n", what, mean,
                Percentile(v, 0.5), Percentile(v, 0.99), v.size());
  };
  report("best record (Database::Best):", best_us);
  report("top-10 (Database::TopK):", top_us);
  report("compiler lookup (db::Lookup):", lookup_us);
  std::printf("best-record hits: %d of %d\n", hits, kQueries);

  auto m0 = Clock::now();
  absl::StatusOr<std::vector<std::string>> traces = (*db)->MeasuredTraces("wkey7", DeviceClass(0));
  if (!traces.ok()) return Fail(traces.status());
  std::printf("measured traces of one workload/device class: %zu traces in %.2f ms\n",
              traces->size(), Seconds(m0, Clock::now()) * 1e3);
  auto s0 = Clock::now();
  absl::StatusOr<lathe::db::Stats> stats = (*db)->GetStats();
  if (!stats.ok()) return Fail(stats.status());
  std::printf("stats (%lld records, %lld ok): %.1f ms\n", static_cast<long long>(stats->records),
              static_cast<long long>(stats->ok_records), Seconds(s0, Clock::now()) * 1e3);
  db->reset();

  lathe::db::OpenOptions check;
  check.quick_check = true;
  auto q0 = Clock::now();
  db = Database::Open(path, check);
  if (!db.ok()) return Fail(db.status());
  std::printf("open with quick_check: %.0f ms\n", Seconds(q0, Clock::now()) * 1e3);
  db->reset();

  if (!keep) {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  }
  return 0;
}
