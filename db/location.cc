#include "db/location.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace lathe::db {
namespace {

// Length of the scheme when `text` starts with `scheme://`, else 0.
size_t SchemeLength(std::string_view text) {
  if (text.empty() || !absl::ascii_isalpha(static_cast<unsigned char>(text[0]))) return 0;
  size_t i = 1;
  while (i < text.size()) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (absl::ascii_isalnum(c) || c == '+' || c == '-' || c == '.') {
      ++i;
      continue;
    }
    break;
  }
  if (text.substr(i, 3) != "://") return 0;
  return i;
}

}  // namespace

bool IsDatabaseUrl(std::string_view text) { return SchemeLength(text) > 0; }

absl::StatusOr<DatabaseLocation> ParseDatabaseLocation(std::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("database path is empty");
  DatabaseLocation loc;
  const size_t n = SchemeLength(text);
  if (n == 0) {
    loc.kind = StoreKind::kSqlite;
    loc.target = std::string(text);
    loc.display = loc.target;
    return loc;
  }
  const std::string scheme = absl::AsciiStrToLower(std::string(text.substr(0, n)));
  if (scheme != "postgresql" && scheme != "postgres") {
    return absl::InvalidArgumentError(
        absl::StrCat("database URL scheme '", std::string(text.substr(0, n)),
                     "' is not supported (a --db is a SQLite file path or a postgresql:// URL)"));
  }
  loc.kind = StoreKind::kPostgres;
  loc.target = absl::StrCat(scheme, std::string(text.substr(n)));
  loc.display = RedactDatabaseLocation(loc.target);
  return loc;
}

std::string RedactDatabaseLocation(std::string_view text) {
  const size_t n = SchemeLength(text);
  if (n == 0) return std::string(text);
  std::string out(text);
  // user:password@ in the authority (up to the first '/', '?' or '#').
  const size_t start = n + 3;
  size_t end = out.find_first_of("/?#", start);
  if (end == std::string::npos) end = out.size();
  const size_t at = out.rfind('@', end);
  if (at != std::string::npos && at >= start) {
    const size_t colon = out.find(':', start);
    if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
  }
  // password=... among the query parameters.
  for (size_t q = out.find('?'); q != std::string::npos;) {
    const size_t key = q + 1;
    if (out.compare(key, 9, "password=") == 0) {
      size_t value_end = out.find('&', key + 9);
      if (value_end == std::string::npos) value_end = out.size();
      out.replace(key + 9, value_end - key - 9, "***");
    }
    q = out.find('&', key);
  }
  return out;
}

}  // namespace lathe::db
