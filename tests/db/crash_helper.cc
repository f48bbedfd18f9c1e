// Test helper for crash_test.cc: writes records to a database in small transactions and,
// after each commit returns, prints the committed candidate ids (one per line) on stdout.
// Runs until killed. Usage: db_crash_helper DB_PATH RUN_ID

#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "db/database.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: db_crash_helper DB_PATH RUN_ID\n");
    return 2;
  }
  std::string path = argv[1];
  std::string run = argv[2];
  absl::StatusOr<std::unique_ptr<lathe::db::Database>> db = lathe::db::Database::Open(path);
  if (!db.ok()) {
    std::fprintf(stderr, "%s\n", std::string(db.status().message()).c_str());
    return 1;
  }
  std::mt19937 rng(std::stoul(run) * 7919 + 1);
  for (int64_t n = 0;;) {
    int size = 1 + static_cast<int>(rng() % 16);
    std::vector<lathe::db::Record> batch;
    for (int i = 0; i < size; ++i, ++n) {
      lathe::db::Record r;
      r.candidate_id = "run" + run + "-" + std::to_string(n);
      r.workload = "matmul:k=" + std::to_string(n % 5) + ",m=8,n=8";
      r.workload_key = "key-" + std::to_string(n % 5);
      r.device_class = "cpu:Crash CPU:avx2:2c";
      r.trace_json =
          "{\"n\":" + std::to_string(n) + ",\"pad\":\"" + std::string(rng() % 600, 'p') + "\"}";
      r.repeats_us = {1.0 + n % 13, 2.0, 3.0};
      r.worker = "crash-helper";
      r.measured_at_ms = n;
      batch.push_back(std::move(r));
    }
    absl::StatusOr<std::vector<lathe::db::InsertResult>> res = (*db)->InsertBatch(batch);
    if (!res.ok()) {
      std::fprintf(stderr, "%s\n", std::string(res.status().message()).c_str());
      return 1;
    }
    // Acknowledge only after the commit returned.
    std::string acks;
    for (const lathe::db::Record& r : batch) acks += r.candidate_id + "\n";
    size_t off = 0;
    while (off < acks.size()) {
      ssize_t w = ::write(1, acks.data() + off, acks.size() - off);
      if (w <= 0) return 1;
      off += static_cast<size_t>(w);
    }
  }
}
