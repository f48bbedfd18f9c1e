// \file
// The `--db` option of `lathe` and `lathed`: a SQLite file path or a PostgreSQL URL
// (db/location.h), checked where it is parsed, so that an unknown URL scheme is a usage error
// (exit 2) naming the scheme before anything is opened or created.
#ifndef LATHE_TOOLS_DB_OPTION_H_
#define LATHE_TOOLS_DB_OPTION_H_

#include <string>

#include "CLI/CLI.hpp"
#include "db/location.h"

namespace lathe::tools {

inline CLI::Validator DatabaseLocationCheck() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        absl::StatusOr<db::DatabaseLocation> location = db::ParseDatabaseLocation(value);
        return location.ok() ? std::string() : std::string(location.status().message());
      },
      "PATH|postgresql://...", "database location");
}

// What `lathe ... --help` says of --db.
inline constexpr char kDbHelp[] =
    "tuning database: a SQLite file, or a PostgreSQL URL postgresql://[user[:password]@]"
    "host[:port]/dbname[?param=value...] shared by several daemons";

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_DB_OPTION_H_
