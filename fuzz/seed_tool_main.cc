// Writes the seeds of the fuzz targets that are made, not copied (make_corpus.sh calls it):
//
//   lathe_fuzz_seeds session IN.txtpb OUT.bin
//       the binary form of a text-format lathe.fuzz.Session (seeds/tuner_rpc/*.txtpb), the
//       input fuzz_tuner_rpc reads;
//   lathe_fuzz_seeds traces SPECS TRACE_DIR JSONL_DIR
//       for each workload spec of the file SPECS (one a line): traces the CPU search space
//       samples for it (TRACE_DIR/<n>.json) and a JSONL export holding them as measured
//       records, with one failed record beside them (JSONL_DIR/<n>.jsonl).
#include <google/protobuf/text_format.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/jsonl.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "proto/trace_io.h"
#include "rpc_session.pb.h"
#include "tuner/space_factory.h"
#include "tuner/tune_common.h"

namespace {

constexpr char kDeviceClass[] = "cpu:Seed CPU:avx2:4c";
constexpr int kTracesPerSpec = 3;

int Session(const std::string& in_path, const std::string& out_path) {
  std::ifstream in(in_path);
  std::stringstream text;
  text << in.rdbuf();
  lathe::fuzz::Session session;
  if (!in || !google::protobuf::TextFormat::ParseFromString(text.str(), &session)) {
    std::fprintf(stderr, "%s: not a text-format lathe.fuzz.Session\n", in_path.c_str());
    return 1;
  }
  std::ofstream out(out_path, std::ios::binary);
  if (!session.SerializeToOstream(&out)) {
    std::fprintf(stderr, "%s: cannot write\n", out_path.c_str());
    return 1;
  }
  return 0;
}

// The records of one workload's sampled traces: ok ones with plausible latencies, and a
// failed one.
std::vector<lathe::db::Record> Records(const lathe::ir::Workload& w,
                                       const std::vector<lathe::ir::Trace>& traces) {
  std::vector<lathe::db::Record> out;
  for (size_t i = 0; i < traces.size(); ++i) {
    lathe::db::Record r;
    r.workload = w.canonical;
    r.workload_key = w.key;
    r.device_class = kDeviceClass;
    r.trace_json = lathe::traceio::TraceToJson(traces[i]);
    r.candidate_id =
        lathe::tuner::CandidateId(w.key, lathe::ir::ProgramIdOf(traces[i]), kDeviceClass);
    r.flops = w.flops;
    r.median_us = std::max(1.0, w.flops / 1e4) * static_cast<double>(i + 1);
    r.repeats_us = {r.median_us, r.median_us * 1.01};
    r.worker = "seed";
    r.lathe_version = lathe::tuner::kLatheVersion;
    r.measured_at_ms = 1700000000000;
    if (i + 1 == traces.size()) {
      r.error_class = lathe::db::ErrorClass::kCompileError;
      r.error_msg = "seed: a failed record";
      r.median_us = 0;
      r.repeats_us.clear();
    }
    out.push_back(std::move(r));
  }
  return out;
}

int Traces(const std::string& specs_path, const std::string& trace_dir,
           const std::string& jsonl_dir) {
  std::ifstream specs(specs_path);
  std::string spec;
  int n = 0;
  std::mt19937_64 rng(1);
  while (std::getline(specs, spec)) {
    absl::StatusOr<lathe::ir::Workload> w = lathe::ir::MakeWorkload(spec);
    if (!w.ok()) continue;
    absl::StatusOr<std::unique_ptr<lathe::tuner::SearchSpace>> space =
        lathe::tuner::CreateSearchSpace(*w, "cpu");
    if (!space.ok()) continue;
    std::vector<lathe::ir::Trace> traces;
    for (int i = 0; i < kTracesPerSpec; ++i) {
      absl::StatusOr<lathe::tuner::Candidate> c = (*space)->Sample(rng);
      if (c.ok()) traces.push_back(c->trace);
    }
    if (traces.empty()) continue;
    for (const lathe::ir::Trace& t : traces) {
      std::ofstream(trace_dir + "/" + std::to_string(n++) + ".json")
          << lathe::traceio::TraceToJson(t, /*pretty=*/true);
    }
    const std::string db_path = jsonl_dir + "/.seed.db";
    std::remove(db_path.c_str());
    {
      absl::StatusOr<std::unique_ptr<lathe::db::Database>> db = lathe::db::Database::Open(db_path);
      if (!db.ok()) {
        std::fprintf(stderr, "%s: %s\n", db_path.c_str(), db.status().ToString().c_str());
        return 1;
      }
      for (const lathe::db::Record& r : Records(*w, traces)) (void)(*db)->Insert(r);
      std::ofstream out(jsonl_dir + "/" + std::to_string(n) + ".jsonl");
      (void)lathe::db::ExportJsonl(**db, out);
    }
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((db_path + suffix).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 3 && args[0] == "session") return Session(args[1], args[2]);
  if (args.size() == 4 && args[0] == "traces") return Traces(args[1], args[2], args[3]);
  std::fprintf(stderr,
               "usage: lathe_fuzz_seeds session IN.txtpb OUT.bin\n"
               "       lathe_fuzz_seeds traces SPECS TRACE_DIR JSONL_DIR\n");
  return 2;
}
