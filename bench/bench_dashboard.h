// \file
// Part 4 of bench_service: lathed's dashboard and batched queries under a fleet's load.
//
//   a. The dashboard's data endpoints (HTTP on loopback, with the token) while N simulated
//      workers (default 500) lease, "measure" and report for 20 running jobs: p50/p99 of
//      /api/state (target p99 <= 50 ms), /api/records and /api/curve, beside /healthz (the
//      HTTP server's floor) and /api/state of the same daemon before the fleet arrived.
//   b. best_many: QueryBestMany of 1,000 workloads over gRPC (target <= 200 ms), beside the
//      same 1,000 answers by one QueryBest call each, in the same run.
#ifndef LATHE_BENCH_BENCH_DASHBOARD_H_
#define LATHE_BENCH_BENCH_DASHBOARD_H_

namespace lathe::bench {

void DashboardUnderLoad(int workers, int jobs, int seconds, int measure_ms, int search_threads,
                        int search_nice);

}  // namespace lathe::bench

#endif  // LATHE_BENCH_BENCH_DASHBOARD_H_
