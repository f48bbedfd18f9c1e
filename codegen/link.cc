// \file
// In-process shared-library linking with lld (codegen/link.h).
#include "codegen/link.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lld/Common/Driver.h"
#include "llvm/BinaryFormat/ELF.h"
#include "llvm/Object/ELFObjectFile.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

namespace lathe::codegen {

extern const unsigned char kLatheRuntimeObject[];
extern const size_t kLatheRuntimeObjectSize;

namespace {

namespace fs = std::filesystem;

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Create() {
    const char* base = getenv("TMPDIR");
    std::string templ =
        absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/lathe-link-XXXXXX");
    if (mkdtemp(templ.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create temporary directory '", templ, "'"));
    }
    return TempDir(templ);
  }
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

absl::Status WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

// The directory holding the C library the kernels will load, e.g. /lib/x86_64-linux-gnu.
absl::StatusOr<std::string> FindLibDir() {
  static const char* const kDirs[] = {
      "/lib/x86_64-linux-gnu",
      "/usr/lib/x86_64-linux-gnu",
      "/lib/aarch64-linux-gnu",
      "/usr/lib/aarch64-linux-gnu",
      "/lib64",
      "/usr/lib64",
      "/lib",
      "/usr/lib",
  };
  for (const char* dir : kDirs) {
    std::error_code ec;
    if (fs::exists(fs::path(dir) / "libc.so.6", ec) &&
        fs::exists(fs::path(dir) / "libm.so.6", ec)) {
      return std::string(dir);
    }
  }
  return absl::NotFoundError("cannot find libc.so.6 and libm.so.6 to link against");
}

absl::StatusOr<llvm::object::OwningBinary<llvm::object::ObjectFile>> OpenElf(
    const std::string& path) {
  auto binary = llvm::object::ObjectFile::createObjectFile(path);
  if (!binary) {
    return absl::InternalError(
        absl::StrCat("cannot read elf file '", path, "': ", llvm::toString(binary.takeError())));
  }
  if (!llvm::isa<llvm::object::ELFObjectFileBase>(binary->getBinary())) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not an elf file"));
  }
  return std::move(*binary);
}

// Dynamic symbols of `path`: defined ones into `defined`, strong undefined ones into
// `undefined` (either may be null).
absl::Status DynamicSymbols(const std::string& path, std::set<std::string>* defined,
                            std::set<std::string>* undefined) {
  auto binary = OpenElf(path);
  if (!binary.ok()) return binary.status();
  const auto* elf = llvm::cast<llvm::object::ELFObjectFileBase>(binary->getBinary());
  for (const llvm::object::SymbolRef& symbol : elf->getDynamicSymbolIterators()) {
    auto name = symbol.getName();
    auto flags = symbol.getFlags();
    if (!name || !flags) {
      llvm::consumeError(name.takeError());
      llvm::consumeError(flags.takeError());
      return absl::InternalError(absl::StrCat("bad dynamic symbol table in '", path, "'"));
    }
    if (name->empty()) continue;
    if (*flags & llvm::object::SymbolRef::SF_Undefined) {
      if (undefined != nullptr && !(*flags & llvm::object::SymbolRef::SF_Weak)) {
        undefined->insert(name->str());
      }
    } else if (defined != nullptr) {
      defined->insert(name->str());
    }
  }
  return absl::OkStatus();
}

// Every strong undefined dynamic symbol of `so_path` must come from libc or libm.
absl::Status CheckUndefined(const std::string& so_path, const std::string& lib_dir) {
  std::set<std::string> undefined;
  if (absl::Status s = DynamicSymbols(so_path, nullptr, &undefined); !s.ok()) return s;
  if (undefined.empty()) return absl::OkStatus();
  static std::once_flag once;
  static std::set<std::string>* available = new std::set<std::string>();
  static absl::Status* load_status = new absl::Status();
  std::call_once(once, [&lib_dir] {
    for (const char* lib : {"libc.so.6", "libm.so.6"}) {
      absl::Status s = DynamicSymbols(absl::StrCat(lib_dir, "/", lib), available, nullptr);
      if (!s.ok()) *load_status = s;
    }
  });
  if (!load_status->ok()) return *load_status;
  std::vector<std::string> missing;
  for (const std::string& name : undefined) {
    if (available->count(name) == 0) missing.push_back(name);
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "shared library '", so_path,
      "' has undefined symbols outside libc and libm: ", absl::StrJoin(missing, ", ")));
}

std::mutex& LldMutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

}  // namespace

std::string_view RuntimeObjectBytes() {
  return std::string_view(reinterpret_cast<const char*>(kLatheRuntimeObject),
                          kLatheRuntimeObjectSize);
}

absl::Status LinkSharedLibrary(const std::vector<std::string>& object_files_bytes,
                               const std::string& out_path) {
  if (object_files_bytes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no object files to link into '", out_path, "'"));
  }
  absl::StatusOr<std::string> lib_dir = FindLibDir();
  if (!lib_dir.ok()) return lib_dir.status();
  absl::StatusOr<TempDir> temp = TempDir::Create();
  if (!temp.ok()) return temp.status();

  std::vector<std::string> inputs;
  for (size_t i = 0; i < object_files_bytes.size(); ++i) {
    inputs.push_back(absl::StrCat(temp->path(), "/kernel", i, ".o"));
    if (absl::Status s = WriteFile(inputs.back(), object_files_bytes[i]); !s.ok()) return s;
  }
  inputs.push_back(temp->path() + "/lathe_runtime.o");
  if (absl::Status s = WriteFile(inputs.back(), RuntimeObjectBytes()); !s.ok()) return s;

  const fs::path out(out_path);
  const std::string linked = temp->path() + "/out.so";
  const std::string soname = absl::StrCat("-soname=", out.filename().string());
  const std::string libc = absl::StrCat(*lib_dir, "/libc.so.6");
  const std::string libm = absl::StrCat(*lib_dir, "/libm.so.6");
  std::vector<const char*> args = {"ld.lld", "-shared", "-o", linked.c_str(), soname.c_str(),
                                   "--no-undefined", "--eh-frame-hdr", "--hash-style=both", "-z",
                                   "relro", "-z", "now", "-z", "noexecstack",
                                   // The runtime's worker threads run code of this library for the
                                   // life of the process: dlclose must never unmap it.
                                   "-z", "nodelete", "-O1"};
  for (const std::string& input : inputs) args.push_back(input.c_str());
  args.push_back("--as-needed");
  args.push_back(libc.c_str());
  args.push_back(libm.c_str());

  std::string lld_out, lld_err;
  bool ok = false;
  {
    llvm::raw_string_ostream out_os(lld_out), err_os(lld_err);
    std::lock_guard<std::mutex> lock(LldMutex());
    ok = lld::elf::link(args, out_os, err_os, /*exitEarly=*/false, /*disableOutput=*/false);
    lld::CommonLinkerContext::destroy();
    out_os.flush();
    err_os.flush();
  }
  if (!ok) {
    return absl::InternalError(absl::StrCat("linking shared library '", out_path,
                                            "' failed: ", lld_err.empty() ? lld_out : lld_err));
  }
  if (absl::Status s = CheckUndefined(linked, *lib_dir); !s.ok()) return s;

  // Move into place atomically (copy into the destination directory first: the temporary
  // directory may live on another file system).
  const std::string staged = absl::StrCat(out_path, ".tmp.", getpid());
  std::error_code ec;
  fs::copy_file(linked, staged, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::permissions(staged, fs::perms(0755), ec);
  if (!ec) fs::rename(staged, out_path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(staged, ignored);
    return absl::InternalError(
        absl::StrCat("cannot write shared library '", out_path, "': ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> SharedLibraryNeeded(const std::string& path) {
  auto binary = OpenElf(path);
  if (!binary.ok()) return binary.status();
  const auto* elf = llvm::dyn_cast<llvm::object::ELF64LEObjectFile>(binary->getBinary());
  if (elf == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a 64-bit little-endian elf file"));
  }
  const auto& file = elf->getELFFile();
  auto entries = file.dynamicEntries();
  if (!entries) {
    return absl::InternalError(absl::StrCat("cannot read dynamic section of '", path,
                                            "': ", llvm::toString(entries.takeError())));
  }
  uint64_t strtab_addr = 0;
  std::vector<uint64_t> needed_offsets;
  for (const auto& entry : *entries) {
    if (entry.d_tag == llvm::ELF::DT_STRTAB) strtab_addr = entry.getPtr();
    if (entry.d_tag == llvm::ELF::DT_NEEDED) needed_offsets.push_back(entry.getVal());
  }
  auto strtab = file.toMappedAddr(strtab_addr);
  if (!strtab) {
    return absl::InternalError(absl::StrCat("cannot find dynamic string table of '", path,
                                            "': ", llvm::toString(strtab.takeError())));
  }
  const char* base = reinterpret_cast<const char*>(*strtab);
  const llvm::StringRef data =
      file.getBufSize() > 0
          ? llvm::StringRef(reinterpret_cast<const char*>(file.base()), file.getBufSize())
          : llvm::StringRef();
  std::vector<std::string> needed;
  for (uint64_t offset : needed_offsets) {
    const char* name = base + offset;
    if (name < data.begin() || name >= data.end()) {
      return absl::InternalError(absl::StrCat("bad DT_NEEDED entry in '", path, "'"));
    }
    needed.emplace_back(name, strnlen(name, data.end() - name));
  }
  return needed;
}

}  // namespace lathe::codegen
