// \file
// Text from requests as it goes into lathed's log: one line per event whatever a client sent.
// Control characters, quotes and backslashes are escaped (\n, \", \\, \xNN) and the text is
// cut at `max_bytes` (marked "..."), so that a hostname or an id cannot forge a log line or
// flood the log.
#ifndef LATHE_DAEMON_LOG_TEXT_H_
#define LATHE_DAEMON_LOG_TEXT_H_

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace lathe::daemon {

inline std::string LogText(std::string_view s, size_t max_bytes = 256) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 8);
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == max_bytes) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace lathe::daemon

#endif  // LATHE_DAEMON_LOG_TEXT_H_
