// Helpers for the dataset tests: temp directories, data files, reading whole epochs.
#pragma once

#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "worker/data/batch_reader.h"
#include "worker/data/dataset.h"

namespace traintl {
namespace data {
namespace testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/traintl-data-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() { (void)RemoveAll(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// What a forked child wrote to its pipe, and how it ended (waitpid's status).
struct ChildEnd {
  std::string written;
  int status = 0;
};

// Runs `fn` in a forked child with the write end of a pipe, then ends the child
// (_exit(0), unless `fn` ended it); returns what it wrote there and its status.
inline ChildEnd ForkWithPipe(const std::function<void(int fd)>& fn) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    fn(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  ChildEnd end;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) end.written.append(buf, n);
  ::close(fds[0]);
  REQUIRE(::waitpid(pid, &end.status, 0) == pid);
  return end;
}

// Runs `fn` in a forked child, so that what it does (its memory, its credentials) stays
// there, and returns the `n` values it returned (-1 each when it returned fewer).
inline std::vector<int64_t> InChild(size_t n, const std::function<std::vector<int64_t>()>& fn) {
  const ChildEnd end = ForkWithPipe([&](int fd) {
    std::vector<int64_t> out = fn();
    out.resize(n, -1);
    (void)!::write(fd, out.data(), n * sizeof(int64_t));
  });
  REQUIRE(end.written.size() == n * sizeof(int64_t));
  std::vector<int64_t> got(n);
  std::memcpy(got.data(), end.written.data(), end.written.size());
  return got;
}

inline void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

// A CSV file "id,x,name" whose ids are [first, first + rows).
inline void WriteIdCsv(const std::string& path, int64_t first, int64_t rows) {
  std::string text = "id,x,name\n";
  for (int64_t i = first; i < first + rows; ++i) {
    text += std::to_string(i) + "," + std::to_string(i * 0.5) + ",row" + std::to_string(i) + "\n";
  }
  Write(path, text);
}

// A CSV "id,x,name" with quoted newlines, CRLF and blank lines: what cutting blocks and
// counting lines get wrong if anything does. With `long_record`, the middle record is
// longer than 20,000 bytes (a block of less must grow); with `size`, the file is padded
// with blank lines to exactly that many bytes.
inline void WriteAwkwardCsv(const std::string& path, int64_t rows, bool long_record = false,
                            size_t size = 0) {
  std::string text = "id,x,name\r\n";
  for (int64_t i = 0; i < rows; ++i) {
    text += std::to_string(i) + "," + std::to_string(i * 0.25) + ",";
    if (long_record && i == rows / 2) {
      text += "\"" + std::string(20000, 'L') + "\"\n";
    } else {
      text += i % 7 == 0 ? "\"two\nlines, quoted\"\r\n" : "plain\n";
    }
    if (i % 50 == 0) text += "\n";
  }
  if (size > 0) {
    REQUIRE(text.size() <= size);
    text.append(size - text.size(), '\n');
  }
  Write(path, text);
}

inline std::shared_ptr<Dataset> OpenDataset(const std::string& uri, int rank = 0, int world = 1,
                                            bool split = true, const ShardOptions& options = {}) {
  DatasetConfig c;
  c.name = "test";
  c.uri = uri;
  c.split = split;
  c.rank = rank;
  c.world_size = world;
  auto ds = Dataset::Open(c, options);
  INFO(ds.status().message());
  REQUIRE(ds.ok());
  return *ds;
}

// Reads an epoch: the values of int64 column `column`, and each batch's row count.
struct Epoch {
  std::vector<int64_t> ids;
  std::vector<int64_t> batch_rows;
  Status status;
  IterStats stats;
};

inline Epoch ReadEpoch(const std::shared_ptr<Dataset>& ds, const IterOptions& options,
                       const std::string& column = "id") {
  Epoch e;
  auto reader = BatchReader::Start(ds, options);
  if (!reader.ok()) {
    e.status = reader.status();
    return e;
  }
  size_t col = 0;
  while (col < (*reader)->schema().size() && (*reader)->schema()[col].name != column) ++col;
  for (;;) {
    auto b = (*reader)->Next();
    if (!b.ok()) {
      e.status = b.status();
      break;
    }
    if (!*b) break;
    e.batch_rows.push_back((*b)->num_rows);
    if (col < (*reader)->schema().size()) {
      const int64_t* v = (*b)->columns[col].As<int64_t>();
      e.ids.insert(e.ids.end(), v, v + (*b)->num_rows);
    }
  }
  e.stats = (*reader)->stats();
  return e;
}

}  // namespace testing
}  // namespace data
}  // namespace traintl
