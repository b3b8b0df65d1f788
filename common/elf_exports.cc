#include "common/elf_exports.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace traintl {
namespace {

// A read-only mapping of a whole file, unmapped on destruction.
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  Status Open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
    if (fd < 0) return Status::NotFound(path + ": " + std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
      ::close(fd);
      return Status::InvalidArgument(path + ": not a regular, non-empty file");
    }
    void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return Status::Internal(path + ": mmap: " + std::strerror(errno));
    data_ = p;
    size_ = static_cast<size_t>(st.st_size);
    return Status::Ok();
  }

  const unsigned char* data() const { return static_cast<const unsigned char*>(data_); }
  size_t size() const { return size_; }
  // True when [offset, offset + len) lies inside the file.
  bool Contains(uint64_t offset, uint64_t len) const {
    return offset <= size_ && len <= size_ - offset;
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

#if defined(__x86_64__)
constexpr int kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr int kMachine = EM_AARCH64;
#else
constexpr int kMachine = -1;  // not checked
#endif

}  // namespace

Result<std::vector<std::string>> ListExportedFunctions(const std::string& path,
                                                       const std::string& prefix) {
  MappedFile file;
  TRAINTL_RETURN_IF_ERROR(file.Open(path));
  const unsigned char* base = file.data();
  if (!file.Contains(0, sizeof(ElfW(Ehdr))) || std::memcmp(base, ELFMAG, SELFMAG) != 0) {
    return Status::InvalidArgument(path + ": not an ELF file");
  }
  ElfW(Ehdr) eh;
  std::memcpy(&eh, base, sizeof eh);
  if (eh.e_ident[EI_CLASS] != (sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32)) {
    return Status::InvalidArgument(path + ": an ELF file of another word size");
  }
  if (eh.e_type != ET_DYN) {
    return Status::InvalidArgument(path +
                                   (eh.e_type == ET_EXEC ? ": an executable" : ": an object file") +
                                   ", not a shared library (link it with -shared)");
  }
  if (kMachine >= 0 && eh.e_machine != kMachine) {
    return Status::InvalidArgument(path + ": built for another architecture (ELF machine " +
                                   std::to_string(eh.e_machine) + ")");
  }
  if (eh.e_shoff == 0 || eh.e_shentsize != sizeof(ElfW(Shdr))) {
    return Status::InvalidArgument(path + ": no section headers");
  }
  if (!file.Contains(eh.e_shoff, sizeof(ElfW(Shdr)))) {
    return Status::InvalidArgument(path + ": truncated section headers");
  }
  auto section = [&](size_t i) {
    ElfW(Shdr) sh;
    std::memcpy(&sh, base + eh.e_shoff + i * sizeof(ElfW(Shdr)), sizeof sh);
    return sh;
  };
  // With SHN_LORESERVE or more sections, the count lives in section 0.
  uint64_t count = eh.e_shnum != 0 ? eh.e_shnum : section(0).sh_size;
  if (count > (file.size() - eh.e_shoff) / sizeof(ElfW(Shdr))) {
    return Status::InvalidArgument(path + ": truncated section headers");
  }

  std::vector<std::string> names;
  bool have_dynsym = false;
  for (size_t i = 0; i < count; ++i) {
    ElfW(Shdr) sh = section(i);
    if (sh.sh_type != SHT_DYNSYM) continue;
    have_dynsym = true;
    if (sh.sh_link >= count || sh.sh_entsize != sizeof(ElfW(Sym)) ||
        !file.Contains(sh.sh_offset, sh.sh_size)) {
      return Status::InvalidArgument(path + ": malformed .dynsym");
    }
    ElfW(Shdr) strtab = section(sh.sh_link);
    if (!file.Contains(strtab.sh_offset, strtab.sh_size)) {
      return Status::InvalidArgument(path + ": malformed dynamic string table");
    }
    const char* strings = reinterpret_cast<const char*>(base + strtab.sh_offset);
    for (uint64_t k = 0; k < sh.sh_size / sizeof(ElfW(Sym)); ++k) {
      ElfW(Sym) sym;
      std::memcpy(&sym, base + sh.sh_offset + k * sizeof(ElfW(Sym)), sizeof sym);
      const unsigned type = ELF64_ST_TYPE(sym.st_info);
      const unsigned bind = ELF64_ST_BIND(sym.st_info);
      const unsigned visibility = ELF64_ST_VISIBILITY(sym.st_other);
      if (sym.st_shndx == SHN_UNDEF || (type != STT_FUNC && type != STT_GNU_IFUNC) ||
          (bind != STB_GLOBAL && bind != STB_WEAK) ||
          (visibility != STV_DEFAULT && visibility != STV_PROTECTED) ||
          sym.st_name >= strtab.sh_size) {
        continue;
      }
      const char* name = strings + sym.st_name;
      size_t len = strnlen(name, strtab.sh_size - sym.st_name);
      if (len == strtab.sh_size - sym.st_name) continue;  // not NUL-terminated
      if (len >= prefix.size() && std::memcmp(name, prefix.data(), prefix.size()) == 0) {
        names.emplace_back(name, len);
      }
    }
  }
  if (!have_dynsym) return Status::InvalidArgument(path + ": no dynamic symbol table");
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace traintl
