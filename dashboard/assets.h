// \file
// The dashboard page's files (dashboard/page/), built into the binary at build time by
// dashboard/embed.cmake, so that lathed serves them without reading any file or fetching
// anything at run time.
#ifndef LATHE_DASHBOARD_ASSETS_H_
#define LATHE_DASHBOARD_ASSETS_H_

#include <optional>
#include <string_view>

namespace lathe::dashboard {

struct Asset {
  std::string_view name;          // file name in dashboard/page/, e.g. "app.js"
  std::string_view content_type;  // e.g. "text/javascript; charset=utf-8"
  std::string_view body;
};

// The file named `name`, or nullopt.
std::optional<Asset> FindAsset(std::string_view name);

}  // namespace lathe::dashboard

#endif  // LATHE_DASHBOARD_ASSETS_H_
