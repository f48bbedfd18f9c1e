// \file
// Where a tuning database lives, as users write it after `--db`: a SQLite file path (the
// embedded default) or a PostgreSQL URL (`postgresql://...` or `postgres://...`, libpq's URI
// form) naming a server that several daemons share. Anything that starts with `scheme://` is a
// URL and is never taken for a file path; a scheme other than PostgreSQL's is refused.
#ifndef LATHE_DB_LOCATION_H_
#define LATHE_DB_LOCATION_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace lathe::db {

enum class StoreKind { kSqlite, kPostgres };

struct DatabaseLocation {
  StoreKind kind = StoreKind::kSqlite;
  // The file path (SQLite) or the URL with its scheme in lower case (PostgreSQL).
  std::string target;
  // `target` as it may be printed: a URL's password replaced by "***".
  std::string display;
};

// True when `text` starts with a URL scheme followed by "://" (RFC 3986: a letter, then
// letters, digits, '+', '-' or '.').
bool IsDatabaseUrl(std::string_view text);

// Parses a `--db` value. InvalidArgument for an empty value and for a URL whose scheme is not
// postgresql/postgres (the message names the scheme); anything that is not a URL is a SQLite
// path, taken as given.
absl::StatusOr<DatabaseLocation> ParseDatabaseLocation(std::string_view text);

// `text` with the password of a URL (user:PASSWORD@ or password=PASSWORD) replaced by "***";
// anything else unchanged.
std::string RedactDatabaseLocation(std::string_view text);

}  // namespace lathe::db

#endif  // LATHE_DB_LOCATION_H_
