// \file
// A real PostgreSQL server for tests: Debian's `postgresql` binaries (initdb, pg_ctl) run into
// a temporary directory, listening only on a unix socket there, as an unprivileged user when
// the test runs as root (initdb refuses root). One server per test process, started on first
// use and stopped (immediately) at exit; each test takes a fresh database of its own.
// $LATHE_TEST_PG_URL (a `postgresql://` URL of a superuser on a running server) replaces the
// temporary server. Where neither can be had, Start() says why, for GTEST_SKIP.
#ifndef LATHE_TESTS_DB_PG_SERVER_H_
#define LATHE_TESTS_DB_PG_SERVER_H_

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace lathe::db::testing {

class PgServer {
 public:
  // The process's server, started on first call; an error says why there is none.
  static absl::StatusOr<PgServer*> Get() {
    static std::mutex mu;
    static std::unique_ptr<PgServer> server;
    static absl::Status failed = absl::OkStatus();
    std::lock_guard<std::mutex> lock(mu);
    if (server != nullptr) return server.get();
    if (!failed.ok()) return failed;
    auto s = std::unique_ptr<PgServer>(new PgServer());
    if (absl::Status st = s->Start(); !st.ok()) {
      failed = st;
      return st;
    }
    server = std::move(s);
    std::atexit([] {
      if (server != nullptr) server->Stop();
    });
    return server.get();
  }

  // A URL of a new, empty database on the server.
  absl::StatusOr<std::string> NewDatabase() {
    static std::atomic<int> counter{0};
    std::string name = absl::StrCat("lathe_t", ::getpid(), "_", counter++);
    if (absl::Status st = Sql(absl::StrCat("CREATE DATABASE ", name)); !st.ok()) return st;
    return Url(name);
  }

  // The URL of database `name` on the server.
  std::string Url(const std::string& name) const {
    if (!external_.empty()) {
      // Replace the database of the external URL (the path after the authority).
      std::string base = external_;
      size_t q = base.find('?');
      std::string query = q == std::string::npos ? "" : base.substr(q);
      if (q != std::string::npos) base.resize(q);
      size_t slash = base.find('/', base.find("://") + 3);
      if (slash != std::string::npos) base.resize(slash);
      return absl::StrCat(base, "/", name, query);
    }
    return absl::StrCat("postgresql:///", name, "?host=", dir_, "&user=lathe");
  }

  // Runs SQL as the superuser on the `postgres` database through psql.
  absl::Status Sql(const std::string& sql, const std::string& db = "postgres") const {
    std::string cmd = absl::StrCat(bin_, "/psql -q -X -v ON_ERROR_STOP=1 '", Url(db), "' -c \"",
                                   sql, "\" >/dev/null 2>&1");
    if (std::system(cmd.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("psql failed: ", sql));
    }
    return absl::OkStatus();
  }

  // Restarts the temporary server at once (-m immediate: its sessions are cut as by a crash).
  absl::Status Restart() {
    if (!external_.empty()) return absl::UnavailableError("an external server is not restarted");
    if (Run(absl::StrCat(bin_, "/pg_ctl -D ", dir_, "/data -l ", dir_,
                         "/server.log -m immediate -w -t 60 restart >/dev/null 2>&1")) != 0) {
      return absl::InternalError(
          absl::StrCat("pg_ctl restart failed: ", Tail(dir_ + "/server.log")));
    }
    return absl::OkStatus();
  }

  // The socket directory of the temporary server (empty for an external one).
  const std::string& dir() const { return dir_; }

  void Stop() {
    // Only the process that started it (not a forked child leaving through exit()).
    if (!started_ || ::getpid() != owner_) return;
    started_ = false;
    Run(absl::StrCat(bin_, "/pg_ctl -D ", dir_, "/data -m immediate stop >/dev/null 2>&1"));
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  ~PgServer() { Stop(); }

 private:
  PgServer() = default;

  // The newest /usr/lib/postgresql/<ver>/bin holding initdb, or $LATHE_PG_BIN.
  static std::string FindBin() {
    if (const char* env = std::getenv("LATHE_PG_BIN"); env != nullptr && *env != '\0') return env;
    std::string best;
    int best_version = -1;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
      std::string bin = entry.path().string() + "/bin";
      if (!std::filesystem::exists(bin + "/initdb") || !std::filesystem::exists(bin + "/pg_ctl"))
        continue;
      int v = std::atoi(entry.path().filename().c_str());
      if (v > best_version) {
        best_version = v;
        best = bin;
      }
    }
    return best;
  }

  // Runs a shell command as the server's user.
  int Run(const std::string& cmd) const {
    std::string full = ::geteuid() == 0 ? absl::StrCat(
                                              "cd / && setpriv --reuid=nobody --regid=nogroup "
                                              "--clear-groups -- sh -c '",
                                              cmd, "'")
                                        : cmd;
    return std::system(full.c_str());
  }

  absl::Status Start() {
    bin_ = FindBin();
    if (const char* url = std::getenv("LATHE_TEST_PG_URL"); url != nullptr && *url != '\0') {
      external_ = url;
      if (bin_.empty()) return absl::UnavailableError("LATHE_TEST_PG_URL set but no psql found");
      return absl::OkStatus();
    }
    if (bin_.empty()) {
      return absl::UnavailableError(
          "no PostgreSQL server binaries (initdb, pg_ctl under /usr/lib/postgresql/*/bin; "
          "Debian package postgresql)");
    }
    if (::geteuid() == 0 && std::system("command -v setpriv >/dev/null 2>&1") != 0) {
      return absl::UnavailableError("running as root and no setpriv to drop to user nobody");
    }
    std::string tmpl = "/tmp/lathe_pg.XXXXXX";  // short: a unix socket path has 107 bytes
    if (::mkdtemp(tmpl.data()) == nullptr) {
      return absl::UnavailableError("cannot make a temporary directory for PostgreSQL");
    }
    dir_ = tmpl;
    if (::geteuid() == 0 && std::system(absl::StrCat("chown nobody:nogroup ", dir_).c_str()) != 0) {
      return absl::UnavailableError(absl::StrCat("cannot give ", dir_, " to user nobody"));
    }
    if (Run(absl::StrCat(bin_, "/initdb -D ", dir_, "/data -A trust -U lathe -E UTF8 --no-sync ",
                         "--no-instructions >", dir_, "/initdb.log 2>&1")) != 0) {
      return absl::UnavailableError(
          absl::StrCat("initdb failed (", dir_, "/initdb.log): ", Tail(dir_ + "/initdb.log")));
    }
    started_ = true;
    owner_ = ::getpid();
    if (Run(absl::StrCat(bin_, "/pg_ctl -D ", dir_, "/data -l ", dir_, "/server.log -w -t 60 ",
                         "-o \"-k ", dir_, " -c listen_addresses= -c fsync=off ",
                         "-c shared_buffers=32MB -c max_connections=200\" start >/dev/null "
                         "2>&1")) != 0) {
      return absl::UnavailableError(absl::StrCat("pg_ctl start failed (", dir_,
                                                 "/server.log): ", Tail(dir_ + "/server.log")));
    }
    return absl::OkStatus();
  }

  static std::string Tail(const std::string& path) {
    std::ifstream in(path);
    std::string line, last;
    while (std::getline(in, line)) {
      if (!line.empty()) last = line;
    }
    return last;
  }

  std::string bin_;
  std::string dir_;
  std::string external_;
  bool started_ = false;
  pid_t owner_ = 0;
};

}  // namespace lathe::db::testing

#endif  // LATHE_TESTS_DB_PG_SERVER_H_
