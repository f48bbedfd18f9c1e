// \file
// In-process linking of kernel objects and the embedded runtime into a self-contained shared
// library (lld as a library; no compiler or linker needs to be installed). Internal to
// codegen/; no LLVM types.
#ifndef LATHE_CODEGEN_LINK_H_
#define LATHE_CODEGEN_LINK_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lathe::codegen {

// The ELF object of codegen/runtime/runtime.c compiled with hidden visibility, -O2 -fPIC;
// embedded at build time.
std::string_view RuntimeObjectBytes();

// Links the ELF relocatable objects in `object_files_bytes` (file contents, not paths) and the
// embedded runtime into the shared library `out_path` (written atomically: a temporary file in
// the same directory, then renamed). Symbols with default visibility in the objects are
// exported; the runtime's are hidden. The library's DT_NEEDED lists only libc.so.6 and, when
// used, libm.so.6. It is marked nodelete (-z nodelete): the runtime's thread pool lives as long
// as the process, so dlclose leaves it mapped. After linking, every undefined dynamic symbol must
// be defined by libc or libm (libpthread is part of glibc's libc); otherwise the output is removed
// and the status names the symbols. Thread-safe: lld is not reentrant, so links are serialised.
absl::Status LinkSharedLibrary(const std::vector<std::string>& object_files_bytes,
                               const std::string& out_path);

// The DT_NEEDED entries of the shared library at `path`, in order.
absl::StatusOr<std::vector<std::string>> SharedLibraryNeeded(const std::string& path);

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_LINK_H_
