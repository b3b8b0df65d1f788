// common/code_archive.h: packing a working_dir into a deterministic ustar archive, the
// safe unpacker and the per-node cache. Real files in temp dirs; malicious archives are
// built byte by byte here, independently of the packer; GNU tar checks the format.
#include "common/code_archive.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "common/file_util.h"
#include "tests/unit/common/tree_snapshot.h"

using namespace traintl;

namespace {

// Trees are compared with their permission bits: fix the umask they are created under.
[[maybe_unused]] const mode_t kCallerUmask = ::umask(022);

// A temp directory removed at the end of the test.
struct TempDir {
  explicit TempDir(const std::string& tag) : path(testing::MakeTempDir(tag)) {}
  ~TempDir() { RemoveAll(path).IgnoreError(); }
  std::string operator/(const std::string& rel) const { return path + "/" + rel; }
  std::string path;
};

void Put(const std::string& path, const std::string& data, mode_t mode = 0644) {
  const std::string dir = DirName(path);
  REQUIRE(MakeDirs(dir, 0755).ok());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  out.close();
  REQUIRE(out.good());
  REQUIRE(::chmod(path.c_str(), mode) == 0);
}

void Dir(const std::string& path) {
  REQUIRE(MakeDirs(path, 0755).ok());
  REQUIRE(::chmod(path.c_str(), 0755) == 0);
}

void Link(const std::string& target, const std::string& at) {
  REQUIRE(::symlink(target.c_str(), at.c_str()) == 0);
}

bool Mentions(const Status& st, const std::string& what) {
  return st.message().find(what) != std::string::npos;
}

// One line per entry below `root`, sorted: relative path, type, permission bits and, for
// regular files, the contents. Symlinks show their target.
std::vector<std::string> Listing(const std::string& root) {
  std::vector<std::string> lines;
  struct Walker {
    std::vector<std::string>* out;
    void Walk(const std::string& full, const std::string& rel) {
      DIR* d = ::opendir(full.c_str());
      if (d == nullptr) return;
      std::vector<std::string> names;
      while (struct dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
      }
      ::closedir(d);
      for (const auto& n : names) {
        const std::string f = full + "/" + n;
        const std::string r = rel.empty() ? n : rel + "/" + n;
        struct stat st;
        if (::lstat(f.c_str(), &st) != 0) continue;
        char mode[16];
        std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
        if (S_ISDIR(st.st_mode)) {
          out->push_back(r + " dir " + mode);
          Walk(f, r);
        } else if (S_ISREG(st.st_mode)) {
          auto data = ReadFile(f);
          out->push_back(r + " file " + mode + " " + (data.ok() ? *data : "<unreadable>"));
        } else if (S_ISLNK(st.st_mode)) {
          char buf[4096];
          ssize_t len = ::readlink(f.c_str(), buf, sizeof buf);
          out->push_back(r + " link " + std::string(buf, len > 0 ? size_t(len) : 0));
        } else {
          out->push_back(r + " other");
        }
      }
    }
  };
  Walker{&lines}.Walk(root, "");
  std::sort(lines.begin(), lines.end());
  return lines;
}

// ---------------------------------------------------------------------------------------
// A minimal ustar reader and writer, independent of the code under test.

struct TarItem {
  std::string name;  // prefix + "/" + name when there is a prefix
  char type = 0;
  std::string mode, uid, gid, mtime, uname, gname, magic;
  std::string data;
};

std::string Field(const char* p, size_t width) {
  size_t n = 0;
  while (n < width && p[n] != '\0') ++n;
  return std::string(p, n);
}

std::vector<TarItem> ParseTar(const std::string& bytes) {
  std::vector<TarItem> items;
  size_t off = 0;
  while (off + 512 <= bytes.size()) {
    const char* h = bytes.data() + off;
    if (std::all_of(h, h + 512, [](char c) { return c == '\0'; })) break;
    TarItem it;
    const std::string prefix = Field(h + 345, 155);
    it.name = prefix.empty() ? Field(h, 100) : prefix + "/" + Field(h, 100);
    it.type = h[156];
    it.mode = Field(h + 100, 8);
    it.uid = Field(h + 108, 8);
    it.gid = Field(h + 116, 8);
    it.mtime = Field(h + 136, 12);
    it.magic = std::string(h + 257, 8);
    it.uname = Field(h + 265, 32);
    it.gname = Field(h + 297, 32);
    const uint64_t size = std::strtoull(Field(h + 124, 12).c_str(), nullptr, 8);
    it.data = bytes.substr(off + 512, size);
    off += 512 + (size + 511) / 512 * 512;
    items.push_back(it);
  }
  return items;
}

std::vector<std::string> Names(const std::string& archive) {
  std::vector<std::string> names;
  for (const auto& it : ParseTar(archive)) names.push_back(it.name);
  return names;
}

bool Has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A ustar header with arbitrary contents, for archives the packer would never write.
std::string Header(const std::string& name, char type, uint64_t size,
                   const std::string& linkname = "", const std::string& prefix = "") {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(&h[100], 8, "%07o", 0644);
  std::snprintf(&h[108], 8, "%07o", 0);
  std::snprintf(&h[116], 8, "%07o", 0);
  std::snprintf(&h[124], 12, "%011llo", static_cast<unsigned long long>(size));
  std::snprintf(&h[136], 12, "%011o", 0);
  h[156] = type;
  std::memcpy(&h[157], linkname.data(), std::min<size_t>(linkname.size(), 100));
  std::memcpy(&h[257],
              "ustar\0"
              "00",
              8);
  std::memcpy(&h[345], prefix.data(), std::min<size_t>(prefix.size(), 155));
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(&h[148], 8, "%06o", sum);
  h[155] = ' ';
  return h;
}

std::string TarFile(const std::string& name, const std::string& data, char type = '0') {
  std::string out = Header(name, type, data.size()) + data;
  out.append((512 - data.size() % 512) % 512, '\0');
  return out;
}

std::string TarDir(const std::string& name) { return Header(name, '5', 0); }

std::string TarEnd() { return std::string(1024, '\0'); }

// A small training project used by several tests.
void MakeProject(const std::string& root) {
  Put(root + "/train.py", "def train_fn(config):\n    return 0\n");
  Put(root + "/run.sh", "#!/bin/sh\nexec python train.py\n", 0755);
  Put(root + "/lib/__init__.py", "");
  Put(root + "/lib/model.py", "class Model: pass\n");
  Put(root + "/lib/ops/kernels.py", std::string("binary\0data\xff", 12));
  Put(root + "/a-c.txt", "sorts before a/ in byte order\n");
  Put(root + "/a/b.py", "b\n");
  Dir(root + "/empty");
  Dir(root + "/lib");
  Dir(root + "/lib/ops");
}

bool HaveTar() { return std::system("command -v tar >/dev/null 2>&1") == 0; }

// Runs `cmd` with a shell; returns its stdout and stderr together and sets *rc.
std::string Run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Format and determinism.

TEST_CASE("PackDirectory writes sorted ustar entries with fixed metadata") {
  TempDir t("pack-format");
  MakeProject(t.path);
  auto packed = PackDirectory(t.path);
  REQUIRE(packed.ok());
  const std::string& bytes = packed->bytes;
  CHECK(bytes.size() % 512 == 0);
  CHECK(bytes.substr(bytes.size() - 1024) == std::string(1024, '\0'));
  CHECK(packed->sha256 == Sha256Hex(bytes));
  CHECK(packed->files == 7);
  int64_t content = 0;
  for (const TarItem& it : ParseTar(bytes)) content += static_cast<int64_t>(it.data.size());
  CHECK(packed->content_bytes == content);
  CHECK(content == 35 + 31 + 0 + 18 + 12 + 30 + 2);

  // Byte order of the names: "a-c.txt" < "a/" ('-' < '/'), a directory before its contents.
  const std::vector<std::string> expected = {"a-c.txt",      "a/",       "a/b.py",
                                             "empty/",       "lib/",     "lib/__init__.py",
                                             "lib/model.py", "lib/ops/", "lib/ops/kernels.py",
                                             "run.sh",       "train.py"};
  CHECK(Names(bytes) == expected);
  for (const TarItem& it : ParseTar(bytes)) {
    INFO(it.name);
    CHECK(it.magic == std::string("ustar\0"
                                  "00",
                                  8));
    CHECK(it.uid == "0000000");
    CHECK(it.gid == "0000000");
    CHECK(it.mtime == "00000000000");
    CHECK(it.uname.empty());
    CHECK(it.gname.empty());
    const bool dir = it.name.back() == '/';
    CHECK(it.type == (dir ? '5' : '0'));
    CHECK(it.mode == ((dir || it.name == "run.sh") ? "0000755" : "0000644"));
  }
}

TEST_CASE("PackDirectory: the same content gives the same bytes and other content other bytes") {
  TempDir t("pack-determinism");
  MakeProject(t.path);
  auto first = PackDirectory(t.path);
  auto second = PackDirectory(t.path);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(first->bytes == second->bytes);

  SECTION("mtimes and atimes do not matter") {
    for (const char* rel : {"train.py", "lib", "lib/model.py", "empty", "."}) {
      struct timespec times[2] = {{12345, 0}, {987654321, 42}};
      REQUIRE(::utimensat(AT_FDCWD, (t / rel).c_str(), times, AT_SYMLINK_NOFOLLOW) == 0);
    }
    auto again = PackDirectory(t.path);
    REQUIRE(again.ok());
    CHECK(again->sha256 == first->sha256);
  }
  SECTION("neither do creation order, the umask's bits other than execute, or the path") {
    TempDir other("pack-determinism-2");
    // Reverse creation order, and permission bits that the archive does not keep.
    Dir(other / "lib/ops");
    Dir(other / "empty");
    Put(other / "a-c.txt", "sorts before a/ in byte order\n", 0600);
    Put(other / "a/b.py", "b\n", 0664);
    Put(other / "lib/ops/kernels.py", std::string("binary\0data\xff", 12), 0640);
    Put(other / "lib/model.py", "class Model: pass\n", 0444);
    Put(other / "lib/__init__.py", "");
    Put(other / "run.sh", "#!/bin/sh\nexec python train.py\n", 0700);
    Put(other / "train.py", "def train_fn(config):\n    return 0\n");
    auto copy = PackDirectory(other.path);
    REQUIRE(copy.ok());
    CHECK(copy->sha256 == first->sha256);
  }
  SECTION("a content change changes the hash") {
    Put(t / "lib/model.py", "class Model: passed\n");
    auto changed = PackDirectory(t.path);
    REQUIRE(changed.ok());
    CHECK(changed->sha256 != first->sha256);
  }
  SECTION("so do an execute bit, a new empty directory and a rename") {
    REQUIRE(::chmod((t / "train.py").c_str(), 0755) == 0);
    auto exec = PackDirectory(t.path);
    REQUIRE(exec.ok());
    CHECK(exec->sha256 != first->sha256);
    REQUIRE(::chmod((t / "train.py").c_str(), 0644) == 0);
    Dir(t / "new_empty");
    auto dir = PackDirectory(t.path);
    REQUIRE(dir.ok());
    CHECK(dir->sha256 != first->sha256);
    REQUIRE(::rmdir((t / "new_empty").c_str()) == 0);
    REQUIRE(::rename((t / "train.py").c_str(), (t / "train2.py").c_str()) == 0);
    auto renamed = PackDirectory(t.path);
    REQUIRE(renamed.ok());
    CHECK(renamed->sha256 != first->sha256);
  }
}

TEST_CASE("PackDirectory of an empty directory is the end marker alone") {
  TempDir t("pack-empty");
  auto packed = PackDirectory(t.path);
  REQUIRE(packed.ok());
  CHECK(packed->bytes == std::string(1024, '\0'));
  CHECK(packed->files == 0);
}

TEST_CASE("PackDirectory refuses a missing working_dir and one that is a file") {
  TempDir t("pack-missing");
  auto missing = PackDirectory(t / "nope");
  CHECK(missing.status().code() == Status::Code::kNotFound);
  CHECK(Mentions(missing.status(), t / "nope"));
  Put(t / "file", "x");
  auto file = PackDirectory(t / "file");
  CHECK(file.status().code() == Status::Code::kInvalidArgument);
  CHECK(Mentions(file.status(), "not a directory"));
}

// ---------------------------------------------------------------------------------------
// Round trip.

TEST_CASE("PackDirectory then UnpackArchive gives back the tree") {
  TempDir t("roundtrip");
  const std::string src = t / "src";
  MakeProject(src);
  Put(src + "/empty_file", "");
  Put(src + "/block", std::string(512, 'b'));
  Put(src + "/block_plus_one", std::string(513, 'c'), 0755);
  Dir(src + "/deep/a/b/c/d/e");
  // A path of 204 bytes: ustar splits it into prefix and name.
  const std::string c40(40, 'x');
  const std::string long_path = c40 + "1/" + c40 + "2/" + c40 + "3/" + c40 + "4/" + c40 + "5.py";
  REQUIRE(long_path.size() == 212);
  Put(src + "/" + long_path.substr(0, long_path.size() - 3), "");  // a sibling file
  Put(src + "/" + long_path, "print('long')\n", 0755);

  auto packed = PackDirectory(src);
  REQUIRE(packed.ok());
  CHECK(Has(Names(packed->bytes), long_path));

  const mode_t old_umask = ::umask(077);  // the unpacked modes must not depend on it
  Status st = UnpackArchive(packed->bytes, t / "out");
  ::umask(old_umask);
  REQUIRE(st.ok());
  CHECK(Listing(t / "out") == Listing(src));
  struct stat dest;
  REQUIRE(::stat((t / "out").c_str(), &dest) == 0);
  CHECK((dest.st_mode & 07777) == 0755);

  SECTION("and repacking the unpacked tree gives the same bytes") {
    auto again = PackDirectory(t / "out");
    REQUIRE(again.ok());
    CHECK(again->sha256 == packed->sha256);
  }
}

TEST_CASE("PackDirectory refuses a path that ustar cannot hold, naming it") {
  TempDir t("pack-long");
  const std::string c60(60, 'y');
  SECTION("no '/' splits it into 155 + 100 bytes") {
    // 60/60/60/50: the name part after any '/' within 155 bytes is over 100.
    const std::string rel = c60 + "/" + c60 + "/" + c60 + "/" + std::string(50, 'z');
    Put(t / rel, "x");
    auto packed = PackDirectory(t.path);
    CHECK(packed.status().code() == Status::Code::kInvalidArgument);
    CHECK(Mentions(packed.status(), rel + ": a path of 233 bytes, too long"));
  }
  SECTION("over 255 bytes") {
    const std::string rel = c60 + "/" + c60 + "/" + std::string(140, 'w');
    Put(t / rel, "x");
    auto packed = PackDirectory(t.path);
    CHECK(packed.status().code() == Status::Code::kInvalidArgument);
    CHECK(Mentions(packed.status(), rel + ": a path of 262 bytes, too long"));
  }
  SECTION("excluded, it is no error") {
    const std::string rel = c60 + "/" + c60 + "/" + c60 + "/" + std::string(50, 'z');
    Put(t / rel, "x");
    PackOptions options;
    options.excludes = {"/" + c60 + "/"};
    CHECK(PackDirectory(t.path, options).ok());
  }
}

// ---------------------------------------------------------------------------------------
// Excludes.

TEST_CASE("PackDirectory always leaves out .git, __pycache__ and *.pyc") {
  TempDir t("pack-builtin");
  Put(t / "train.py", "x");
  Put(t / ".git/HEAD", "ref: refs/heads/main\n");
  Put(t / "vendor/dep/.git", "gitdir: /somewhere/else\n");  // a submodule's .git file
  Put(t / "vendor/dep/mod.py", "y");
  Put(t / "__pycache__/train.cpython-311.pyc", "z");
  Put(t / "lib/__pycache__/x.pyc", "z");
  Put(t / "lib/stale.pyc", "z");
  Put(t / "lib/ok.py", "z");
  PackOptions options;
  options.excludes = {"!*.pyc", "!__pycache__/", "!.git"};  // cannot bring them back
  auto packed = PackDirectory(t.path, options);
  REQUIRE(packed.ok());
  const std::vector<std::string> expected = {"lib/",    "lib/ok.py",   "train.py",
                                             "vendor/", "vendor/dep/", "vendor/dep/mod.py"};
  CHECK(Names(packed->bytes) == expected);
}

TEST_CASE("PackDirectory applies excludes, .gitignore and .traintlignore") {
  TempDir t("pack-excludes");
  Put(t / "train.py", "x");
  Put(t / "data/train.csv", "1,2\n");
  Put(t / "src/data", "a file named data: 'data/' matches directories only\n");
  Put(t / "model.ckpt", "weights");
  Put(t / "runs/1/model.ckpt", "weights");
  Put(t / "runs/1/metrics.json", "{}");
  Put(t / "build/out.o", "o");
  Put(t / "src/build/keep.py", "anchored /build leaves this");
  Put(t / "logs/a/b/debug.log", "l");
  Put(t / "app.log", "l");
  Put(t / "keep.log", "re-included by .traintlignore");
  Put(t / "weights.bin", "re-included by excludes");
  Put(t / "other.bin", "b");
  Put(t / "cache/small.csv", "!cache/small.csv cannot re-include below cache/");
  Put(t / "tmp1.txt", "t");
  Put(t / "tmpA.txt", "t");
  Put(t / "tmpz.txt", "t");
  Put(t / "docs/a/b/notes.md", "**/notes.md");
  Put(t / "docs/readme.md", "r");
  Put(t / "sub/.gitignore", "*\n");  // nested ignore files do not apply
  Put(t / "sub/kept.py", "k");
  Put(t / ".gitignore",
      "# comment, then a blank line\n"
      "\n"
      "/build\n"
      "*.log\n"
      "*.bin\n"
      "cache/\n"
      "tmp[0-9].txt\n"
      "tmp?.txt\n"
      "!tmpz.txt\n"
      "**/notes.md\n"
      "logs/**\n");
  Put(t / ".traintlignore", "!keep.log\n");
  PackOptions options;
  options.excludes = {"data/", "*.ckpt", "!weights.bin", "!cache/small.csv"};
  auto packed = PackDirectory(t.path, options);
  REQUIRE(packed.ok());
  const std::vector<std::string> names = Names(packed->bytes);
  const std::vector<std::string> expected = {
      ".gitignore",  ".traintlignore", "docs/",
      "docs/a/",     "docs/a/b/",      "docs/readme.md",
      "keep.log",
      "logs/",  // "logs/**" leaves the directory itself
      "runs/",       "runs/1/",        "runs/1/metrics.json",
      "src/",        "src/build/",     "src/build/keep.py",
      "src/data",    "sub/",           "sub/.gitignore",
      "sub/kept.py", "tmpz.txt",       "train.py",
      "weights.bin",
  };
  CHECK(names == expected);
}

// ---------------------------------------------------------------------------------------
// Symlinks and special files.

TEST_CASE("PackDirectory follows symlinks that stay inside the working_dir") {
  TempDir t("pack-links");
  const std::string src = t / "src";
  Put(src + "/real.py", "real\n");
  Put(src + "/tool.sh", "#!/bin/sh\n", 0755);
  Put(src + "/shared/util.py", "util\n");
  Link("real.py", src + "/alias.py");     // relative
  Link(src + "/tool.sh", src + "/tool");  // absolute, executable target
  Link("shared", src + "/pkg");           // a directory
  Dir(src + "/nested");
  Link("../alias.py", src + "/nested/chain.py");    // a link to a link
  Link("../shared", src + "/nested/shared_again");  // the same directory twice, not a cycle

  auto packed = PackDirectory(src);
  REQUIRE(packed.ok());
  const std::vector<std::string> expected = {"alias.py",
                                             "nested/",
                                             "nested/chain.py",
                                             "nested/shared_again/",
                                             "nested/shared_again/util.py",
                                             "pkg/",
                                             "pkg/util.py",
                                             "real.py",
                                             "shared/",
                                             "shared/util.py",
                                             "tool",
                                             "tool.sh"};
  CHECK(Names(packed->bytes) == expected);
  REQUIRE(UnpackArchive(packed->bytes, t / "out").ok());
  auto listing = Listing(t / "out");
  CHECK(Has(listing, "alias.py file 0644 real\n"));
  CHECK(Has(listing, "nested/chain.py file 0644 real\n"));
  CHECK(Has(listing, "tool file 0755 #!/bin/sh\n"));
  CHECK(Has(listing, "pkg/util.py file 0644 util\n"));
}

TEST_CASE("PackDirectory refuses a symlink leading outside the working_dir, naming it") {
  TempDir t("pack-escape");
  TempDir outside("pack-escape-target");
  Put(outside / "secret", "s");
  const std::string src = t / "src";
  Put(src + "/train.py", "x");
  SECTION("an absolute target") {
    Link(outside.path, src + "/data");
    auto packed = PackDirectory(src);
    CHECK(packed.status().code() == Status::Code::kInvalidArgument);
    CHECK(Mentions(packed.status(), "data: a symlink to " + outside.path));
    CHECK(Mentions(packed.status(), "outside the working_dir"));
  }
  SECTION("a relative one, below a subdirectory") {
    Put(t / "x", "outside");
    Dir(src + "/sub");
    Link("../../x", src + "/sub/up");
    auto packed = PackDirectory(src);
    CHECK(packed.status().code() == Status::Code::kInvalidArgument);
    CHECK(Mentions(packed.status(), "sub/up: a symlink to ../../x (" + t / "x" + ")"));
  }
  SECTION("to /etc/passwd") {
    Link("/etc/passwd", src + "/passwd");
    auto packed = PackDirectory(src);
    CHECK(Mentions(packed.status(), "passwd: a symlink to /etc/passwd, outside"));
  }
  SECTION("excluded, it is left out and the rest packs") {
    Link(outside.path, src + "/data");
    PackOptions options;
    options.excludes = {"data/"};  // matches: the link points to a directory
    auto packed = PackDirectory(src, options);
    REQUIRE(packed.ok());
    CHECK(Names(packed->bytes) == std::vector<std::string>{"train.py"});
  }
}

TEST_CASE("PackDirectory refuses dangling symlinks and cycles, naming them") {
  TempDir t("pack-dangling");
  Put(t / "train.py", "x");
  SECTION("dangling") {
    Dir(t / "lib");
    Link("missing.py", t / "lib/gone.py");
    auto packed = PackDirectory(t.path);
    CHECK(packed.status().code() == Status::Code::kInvalidArgument);
    CHECK(Mentions(packed.status(), "lib/gone.py: a dangling symlink to missing.py"));
  }
  SECTION("a link to the root") {
    Dir(t / "sub");
    Link("..", t / "sub/loop");
    auto packed = PackDirectory(t.path);
    CHECK(packed.status().code() == Status::Code::kInvalidArgument);
    CHECK(Mentions(packed.status(), "sub/loop: a symlink to .."));
    CHECK(Mentions(packed.status(), "cycle"));
  }
  SECTION("a link to its own directory") {
    Dir(t / "a/b");
    Link(".", t / "a/b/self");
    auto packed = PackDirectory(t.path);
    CHECK(Mentions(packed.status(), "a/b/self: a symlink to ."));
    CHECK(Mentions(packed.status(), "cycle"));
  }
  SECTION("two links pointing at each other") {
    Link("pong", t / "ping");
    Link("ping", t / "pong");
    auto packed = PackDirectory(t.path);
    CHECK(packed.status().code() == Status::Code::kInvalidArgument);
    CHECK(Mentions(packed.status(), "ping: a symlink to pong"));
  }
}

TEST_CASE("PackDirectory refuses FIFOs and sockets, naming them, unless excluded") {
  TempDir t("pack-special");
  Put(t / "train.py", "x");
  Dir(t / "run");
  REQUIRE(::mkfifo((t / "run/pipe").c_str(), 0644) == 0);
  auto packed = PackDirectory(t.path);
  CHECK(packed.status().code() == Status::Code::kInvalidArgument);
  CHECK(Mentions(packed.status(), "run/pipe: a FIFO"));

  PackOptions options;
  options.excludes = {"pipe"};
  CHECK(PackDirectory(t.path, options).ok());

  REQUIRE(::unlink((t / "run/pipe").c_str()) == 0);
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  const std::string sock = t / "run/sock";
  REQUIRE(sock.size() < sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) == 0);
  ::close(fd);
  auto with_socket = PackDirectory(t.path);
  CHECK(Mentions(with_socket.status(), "run/sock: a socket"));
}

TEST_CASE("PackDirectory refuses an unreadable file") {
  if (::geteuid() == 0) {
    WARN("skipped: root reads every file");
    return;
  }
  TempDir t("pack-unreadable");
  Put(t / "secret.py", "x", 0000);
  auto packed = PackDirectory(t.path);
  CHECK(packed.status().code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(packed.status(), "secret.py: cannot read"));
}

// ---------------------------------------------------------------------------------------
// The size limit.

TEST_CASE("PackDirectory refuses an archive over max_bytes, naming the largest files") {
  TempDir t("pack-limit");
  Put(t / "train.py", "x");
  Put(t / "data/big.bin", std::string(300 << 10, 'b'));
  Put(t / "data/medium.bin", std::string(200 << 10, 'm'));
  Put(t / "ckpt/small.pt", std::string(100 << 10, 's'));
  Put(t / "tiny.bin", std::string(10, 't'));
  auto unlimited = PackDirectory(t.path);
  REQUIRE(unlimited.ok());
  const uint64_t size = unlimited->bytes.size();

  PackOptions options;
  options.max_bytes = 256 << 10;
  auto packed = PackDirectory(t.path, options);
  CHECK(packed.status().code() == Status::Code::kResourceExhausted);
  const std::string& msg = packed.status().message();
  CHECK(size == 620032);  // 7 headers, the contents in 512-byte blocks, the end marker
  CHECK(Mentions(packed.status(), "working_dir is 605.5 KiB packed, over the 256 KiB limit"));
  CHECK(Mentions(packed.status(), "exclude large files with \"excludes\" or .gitignore"));
  CHECK(Mentions(packed.status(),
                 "data/big.bin 300 KiB, data/medium.bin 200 KiB, ckpt/small.pt 100 KiB"));
  CHECK(msg.find("tiny.bin") == std::string::npos);

  options.max_bytes = size;  // the limit is inclusive
  CHECK(PackDirectory(t.path, options).ok());
  options.max_bytes = size - 1;
  CHECK(PackDirectory(t.path, options).status().code() == Status::Code::kResourceExhausted);
  options.excludes = {"data/"};
  CHECK(PackDirectory(t.path, options).ok());
  CHECK(kDefaultMaxArchiveBytes == 100ull << 20);
}

// ---------------------------------------------------------------------------------------
// Unpacking hostile archives.

TEST_CASE("UnpackArchive refuses hostile entries and leaves no destination behind") {
  TempDir t("unpack-refuse");
  const std::string dest = t / "dest";
  const std::string ok = TarDir("lib/") + TarFile("lib/a.py", "fine");
  struct Case {
    const char* what;
    std::string archive;
    std::string mentions;
    Status::Code code = Status::Code::kInvalidArgument;
  };
  const std::vector<Case> cases = {
      {"a '..' path", ok + TarFile("../x", "evil") + TarEnd(), "\"../x\": a \"..\" component"},
      {"'..' deeper", ok + TarFile("lib/../../x", "evil") + TarEnd(), "\"lib/../../x\""},
      {"an absolute path", ok + TarFile("/etc/x", "evil") + TarEnd(),
       "\"/etc/x\": an absolute path"},
      {"'..' in the prefix field", ok + Header("x", '0', 0, "", "..") + TarEnd(),
       "\"../x\": a \"..\" component"},
      {"a symlink", ok + Header("lib/passwd", '2', 0, "/etc/passwd") + TarEnd(),
       "\"lib/passwd\": a symlink"},
      {"a hard link", ok + Header("lib/h", '1', 0, "/etc/shadow") + TarEnd(),
       "\"lib/h\": a hard link"},
      {"a FIFO", ok + Header("lib/p", '6', 0) + TarEnd(), "\"lib/p\": a FIFO"},
      {"a pax header", Header("PaxHeaders/x", 'x', 0) + ok + TarEnd(), "a pax extended header"},
      {"a GNU long name", Header("././@LongLink", 'L', 0) + ok + TarEnd(), "a GNU long name"},
      {"a duplicate file", ok + TarFile("lib/a.py", "again") + TarEnd(),
       "\"lib/a.py\": a duplicate entry"},
      {"a duplicate directory", ok + TarDir("lib/") + TarEnd(), "\"lib/\": a duplicate entry"},
      {"a NUL inside the name", ok + TarFile(std::string("ok\0/../../x", 11), "e") + TarEnd(),
       "a name with a NUL inside it"},
      {"a '.' component", ok + TarFile("./x", "e") + TarEnd(), "\"./x\": an empty or \".\""},
      {"a file below a file", ok + TarFile("lib/a.py/b", "e") + TarEnd(), "\"lib/a.py/b\""},
      {"no end marker", ok, "no end-of-archive marker"},
      {"truncated data", ok + Header("lib/b.py", '0', 4096) + std::string(512, 'd'),
       "\"lib/b.py\": truncated"},
      {"over the size limit",
       TarFile("a", std::string(600, 'a')) + TarFile("b", std::string(600, 'b')) + TarEnd(),
       "\"b\": the archive unpacks to more than 1000 bytes", Status::Code::kResourceExhausted},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Status st = UnpackArchive(c.archive, dest, 1000);
    CHECK(st.code() == c.code);
    CHECK(Mentions(st, c.mentions));
    CHECK_FALSE(PathExists(dest));
    CHECK_FALSE(PathExists(t / "x"));
    CHECK_FALSE(PathExists(t.path + "/../x"));
  }

  SECTION("a bad checksum") {
    std::string archive = ok + TarEnd();
    archive[0] = 'L';  // "lib/" -> "Lib/" without fixing the checksum
    Status st = UnpackArchive(archive, dest);
    CHECK(Mentions(st, "archive entry at offset 0: header checksum mismatch"));
    CHECK_FALSE(PathExists(dest));
  }
  SECTION("the same archive without hostile entries unpacks") {
    REQUIRE(UnpackArchive(ok + TarEnd(), dest).ok());
    CHECK(Listing(dest) == std::vector<std::string>{"lib dir 0755", "lib/a.py file 0644 fine"});
  }
}

TEST_CASE("UnpackArchive refuses an existing destination and leaves it alone") {
  TempDir t("unpack-exists");
  Put(t / "dest/mine", "keep");
  Status st = UnpackArchive(TarFile("x", "y") + TarEnd(), t / "dest");
  CHECK(st.code() == Status::Code::kAlreadyExists);
  CHECK(Listing(t / "dest") == std::vector<std::string>{"mine file 0644 keep"});
  CHECK(UnpackArchive(TarEnd(), t / "no/parent").code() == Status::Code::kNotFound);
}

TEST_CASE("UnpackArchive creates directories an archive leaves implicit") {
  TempDir t("unpack-implicit");
  std::string archive = TarFile("a/b/c.txt", "c") + TarDir("a/") + TarEnd();
  REQUIRE(UnpackArchive(archive, t / "out").ok());
  CHECK(Listing(t / "out") ==
        std::vector<std::string>{"a dir 0755", "a/b dir 0755", "a/b/c.txt file 0644 c"});
}

// ---------------------------------------------------------------------------------------
// The cache.

TEST_CASE("EnsureUnpacked unpacks once and then returns the cached directory") {
  TempDir t("cache");
  MakeProject(t / "src");
  auto packed = PackDirectory(t / "src");
  REQUIRE(packed.ok());
  const std::string archive = t / "archive.tar";
  Put(archive, packed->bytes);
  const std::string cache = t / "node/cache";  // created, with its parent

  auto first = EnsureUnpacked(cache, packed->sha256, archive);
  REQUIRE(first.ok());
  CHECK(*first == cache + "/" + packed->sha256);
  CHECK(Listing(*first) == Listing(t / "src"));
  struct stat st1;
  REQUIRE(::stat((*first + "/train.py").c_str(), &st1) == 0);
  struct stat cache_st;
  REQUIRE(::stat(cache.c_str(), &cache_st) == 0);
  CHECK((cache_st.st_mode & 07777) == 0755);

  // The second call does not even read the archive.
  REQUIRE(::unlink(archive.c_str()) == 0);
  auto second = EnsureUnpacked(cache, packed->sha256, archive);
  REQUIRE(second.ok());
  CHECK(*second == *first);
  struct stat st2;
  REQUIRE(::stat((*second + "/train.py").c_str(), &st2) == 0);
  CHECK(st2.st_ino == st1.st_ino);
  CHECK(Listing(cache).size() == Listing(t / "src").size() + 1);  // no .tmp-* left over
}

TEST_CASE("EnsureUnpacked refuses a malformed hash and an archive with another hash") {
  TempDir t("cache-refuse");
  Put(t / "a.tar", TarFile("x", "y") + TarEnd());
  const std::string upper(64, 'A');
  CHECK(EnsureUnpacked(t / "cache", upper, t / "a.tar").status().code() ==
        Status::Code::kInvalidArgument);
  CHECK(EnsureUnpacked(t / "cache", "../../etc", t / "a.tar").status().code() ==
        Status::Code::kInvalidArgument);
  const std::string wrong(64, 'a');
  auto mismatch = EnsureUnpacked(t / "cache", wrong, t / "a.tar");
  CHECK(mismatch.status().code() == Status::Code::kInvalidArgument);
  CHECK(Mentions(mismatch.status(), "not " + wrong));
  CHECK(Listing(t / "cache").empty());
  // A hostile archive with the right hash is refused by the unpacker, leaving no trace.
  const std::string hostile = TarFile("../escape", "e") + TarEnd();
  Put(t / "h.tar", hostile);
  auto refused = EnsureUnpacked(t / "cache", Sha256Hex(hostile), t / "h.tar");
  CHECK(Mentions(refused.status(), "\"../escape\""));
  CHECK(Listing(t / "cache").empty());
  CHECK_FALSE(PathExists(t / "escape"));
}

TEST_CASE("EnsureUnpacked from 4 threads: all get the same complete directory") {
  TempDir t("cache-threads");
  MakeProject(t / "src");
  for (int i = 0; i < 50; ++i) Put(t / ("src/many/f" + std::to_string(i)), std::to_string(i));
  auto packed = PackDirectory(t / "src");
  REQUIRE(packed.ok());
  Put(t / "archive.tar", packed->bytes);
  const std::string cache = t / "cache";
  for (int round = 0; round < 3; ++round) {
    RemoveAll(cache).IgnoreError();
    std::vector<Result<std::string>> results(4, Status::Internal("not run"));
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < 4) {
        }
        results[i] = EnsureUnpacked(cache, packed->sha256, t / "archive.tar");
      });
    }
    for (auto& th : threads) th.join();
    for (const auto& r : results) {
      REQUIRE(r.ok());
      CHECK(*r == cache + "/" + packed->sha256);
    }
    CHECK(Listing(cache + "/" + packed->sha256) == Listing(t / "src"));
    auto entries = Listing(cache);
    CHECK(std::none_of(entries.begin(), entries.end(),
                       [](const std::string& l) { return l.rfind(".tmp-", 0) == 0; }));
  }
}

TEST_CASE("EnsureUnpacked from 4 processes: all get the same directory") {
  TempDir t("cache-procs");
  MakeProject(t / "src");
  auto packed = PackDirectory(t / "src");
  REQUIRE(packed.ok());
  Put(t / "archive.tar", packed->bytes);
  const std::string cache = t / "cache";
  const std::string expected = cache + "/" + packed->sha256;
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      auto r = EnsureUnpacked(cache, packed->sha256, t / "archive.tar");
      ::_exit(r.ok() && *r == expected ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(Listing(expected) == Listing(t / "src"));
  CHECK(Listing(cache).size() == Listing(t / "src").size() + 1);
}

// ---------------------------------------------------------------------------------------
// GNU tar reads what we write, and we read what it writes.

TEST_CASE("GNU tar lists and extracts a packed archive") {
  if (!HaveTar()) {
    WARN("skipped: no tar on this machine");
    return;
  }
  TempDir t("gnu-tar");
  const std::string src = t / "src";
  MakeProject(src);
  const std::string c40(40, 'q');
  const std::string long_path = c40 + "/" + c40 + "/" + c40 + "/" + c40 + "/" + c40 + ".py";
  Put(src + "/" + long_path, "long\n", 0755);
  auto packed = PackDirectory(src);
  REQUIRE(packed.ok());
  Put(t / "a.tar", packed->bytes);

  int rc = 0;
  std::string listed = Run("tar -tf " + t / "a.tar", &rc);
  CHECK(rc == 0);
  std::string expected;
  for (const auto& n : Names(packed->bytes)) expected += n + "\n";
  CHECK(listed == expected);  // nothing else either: no warnings
  CHECK(listed.find(long_path + "\n") != std::string::npos);

  Dir(t / "out");
  std::string extracted = Run("tar -xf " + t / "a.tar" + " -C " + t / "out", &rc);
  CHECK(rc == 0);
  CHECK(extracted.empty());
  CHECK(Listing(t / "out") == Listing(src));
}

TEST_CASE("UnpackArchive reads GNU tar's ustar archives") {
  if (!HaveTar()) {
    WARN("skipped: no tar on this machine");
    return;
  }
  TempDir t("gnu-tar-in");
  const std::string src = t / "src";
  MakeProject(src);
  int rc = 0;
  std::string out = Run("cd " + src + " && tar --format=ustar -cf " + t / "g.tar" +
                            " a-c.txt a empty lib run.sh train.py",
                        &rc);
  REQUIRE(rc == 0);
  auto bytes = ReadFile(t / "g.tar");
  REQUIRE(bytes.ok());
  REQUIRE(UnpackArchive(*bytes, t / "out").ok());
  CHECK(Listing(t / "out") == Listing(src));
}
