// \file
// The `lathe` commands that talk to a lathed daemon through the client library
// (client/client.h), CONTRACT.md "The CLI": `lathe tune --tuner`, `lathe query --tuner`,
// `lathe jobs` and `lathe workers`. They print results on stdout, messages on stderr, and
// return the exit status: 0 success, 2 bad usage (also when the daemon rejects the request as
// invalid), 3 no record (query), 1 any other failure (daemon unreachable, refused, ...).
#ifndef LATHE_TOOLS_CLI_REMOTE_H_
#define LATHE_TOOLS_CLI_REMOTE_H_

#include <string>

#include "tools/cli_db.h"
#include "tools/cli_tune.h"

namespace lathe::tools {

// How to reach the daemon.
struct RemoteOptions {
  std::string tuner;       // --tuner HOST:PORT (required)
  std::string token_file;  // --token-file F
  std::string tls_ca;      // --tls-ca F
  bool json = false;       // --json
};

// `lathe tune --tuner HOST:PORT`: submits a job for the workload, follows it with the same
// progress bar as the embedded tuner and prints the same result (FinishTune). The first
// Ctrl-C detaches: the job keeps running on the daemon (the message says how to find it);
// with options.cancel_on_interrupt it cancels the job instead. A second Ctrl-C kills the
// client. A job that FAILED is exit 1 with the daemon's message.
int RunRemoteTune(const TuneCliOptions& options);

// `lathe query --tuner HOST:PORT`: the best record from the daemon's database, printed like
// the local `lathe query` (exit 3 on a miss).
int RunRemoteQuery(const QueryOptions& query, const RemoteOptions& remote);

// `lathe jobs --tuner HOST:PORT [--json]`: the daemon's jobs, newest last. JSON: {"jobs":
// [{id, state, device_class, message, created_at, updated_at, workloads: [{workload,
// trials_done, trials_target, best_latency_us, best_gflops, errors}]}]}.
int RunJobs(const RemoteOptions& remote);

// `lathe workers --tuner HOST:PORT [--json]`: the daemon's workers. JSON: {"workers": [{id,
// hostname, device_class, state, measured, last_seen}]}.
int RunWorkers(const RemoteOptions& remote);

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_CLI_REMOTE_H_
