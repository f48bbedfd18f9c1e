// \file
// A scratch directory for the fuzz targets' SQLite databases (one per target process,
// removed at exit), and removal of a database with its journal files between inputs.
#ifndef LATHE_FUZZ_SCRATCH_H_
#define LATHE_FUZZ_SCRATCH_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace lathe::fuzz {

// PATH of a fresh directory under /tmp, the same for every call of the process.
inline const std::string& ScratchDir() {
  static const std::string* dir = [] {
    char tmpl[] = "/tmp/lathe-fuzz-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("lathe fuzz: mkdtemp");
      std::abort();
    }
    return new std::string(tmpl);
  }();
  static const bool cleanup_registered = [] {
    return std::atexit([] { std::system(("rm -rf '" + ScratchDir() + "'").c_str()); }) == 0;
  }();
  (void)cleanup_registered;
  return *dir;
}

// Removes the database at `path` and its WAL, shared-memory and rollback journal files.
inline void RemoveDatabase(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) unlink((path + suffix).c_str());
}

}  // namespace lathe::fuzz

#endif  // LATHE_FUZZ_SCRATCH_H_
