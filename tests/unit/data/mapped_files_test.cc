// A mapped data file cut short while it is read (worker/data/mapped_files.h): the process
// still ends with SIGBUS, and its stderr (a rank's log) names the file and the byte.
#include "worker/data/mapped_files.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "data_test_util.h"
#include "worker/data/source.h"

using namespace traintl::data;
using namespace traintl::data::testing;

namespace {

constexpr uint64_t kPage = 4096;

std::shared_ptr<const MappedFile> Map(const std::string& path) {
  auto m = MappedFile::Open(DataFile{path, path, false, nullptr}, MappedFile::kAnySize);
  REQUIRE(m.ok());
  return *m;
}

}  // namespace

TEST_CASE("a fault in a mapped data file is described with its name and byte, others are not") {
  TempDir dir;
  const std::string path = dir / "three pages.csv";
  Write(path, std::string(3 * kPage, 'x'));
  auto m = Map(path);
  const char* data = m->data();
  const std::string line = DescribeMappingFault(data + 5000);
  CHECK_THAT(line, Catch::StartsWith("traintl-worker: SIGBUS at byte 5000 of data file " + path +
                                     ": the file is shorter than when it was opened"));
  CHECK(line.back() == '\n');
  CHECK_THAT(DescribeMappingFault(data), Catch::Contains("at byte 0 of"));
  CHECK(DescribeMappingFault(data + 3 * kPage) == "");  // past the mapping
  int local = 0;
  CHECK(DescribeMappingFault(&local) == "");
  // Two files at once: each fault names its own.
  const std::string other = dir / "other.csv";
  Write(other, std::string(kPage, 'y'));
  auto m2 = Map(other);
  CHECK_THAT(DescribeMappingFault(m2->data() + 7), Catch::Contains("byte 7 of data file " + other));
  CHECK_THAT(DescribeMappingFault(data + 7), Catch::Contains(path));
  m.reset();
  CHECK(DescribeMappingFault(data + 7) == "");  // unmapped: forgotten
}

TEST_CASE("a mapped file cut short while read ends the process with SIGBUS, naming the file") {
  TempDir dir;
  const std::string path = dir / "data.csv";
  Write(path, std::string(3 * kPage, 'x'));
  const ChildEnd end = ForkWithPipe([&](int fd) {
    ::dup2(fd, STDERR_FILENO);
    // The test framework's own SIGBUS handler would report a failure from the child: the
    // default action is what a worker has.
    ::signal(SIGBUS, SIG_DFL);
    auto m = MappedFile::Open(DataFile{path, path, false, nullptr}, MappedFile::kAnySize);
    if (!m.ok()) ::_exit(2);
    if (::truncate(path.c_str(), kPage) != 0) ::_exit(3);
    volatile char c = (*m)->data()[2 * kPage + 1];  // past the file's new end
    (void)c;
    ::_exit(4);  // not reached: the read raised SIGBUS
  });
  const std::string& err = end.written;
  const int status = end.status;
  INFO("stderr: " << err << " status: " << status);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGBUS);
  CHECK_THAT(err, Catch::Contains("SIGBUS at byte 8193 of data file " + path +
                                  ": the file is shorter than when it was opened"));
}

TEST_CASE("a SIGBUS handler someone else installed is left alone (no chain that could loop)") {
  TempDir dir;
  const std::string path = dir / "data.csv";
  Write(path, std::string(3 * kPage, 'x'));
  const ChildEnd end = ForkWithPipe([&](int fd) {
    ::dup2(fd, STDERR_FILENO);
    struct sigaction theirs;
    std::memset(&theirs, 0, sizeof theirs);
    theirs.sa_sigaction = [](int, siginfo_t*, void*) {
      (void)!::write(STDERR_FILENO, "their handler\n", 14);
      ::_exit(9);
    };
    theirs.sa_flags = SA_SIGINFO;
    ::sigaction(SIGBUS, &theirs, nullptr);
    auto m = MappedFile::Open(DataFile{path, path, false, nullptr}, MappedFile::kAnySize);
    if (!m.ok()) ::_exit(2);
    if (::truncate(path.c_str(), kPage) != 0) ::_exit(3);
    volatile char c = (*m)->data()[2 * kPage + 1];
    (void)c;
    ::_exit(4);
  });
  INFO("stderr: " << end.written);
  REQUIRE(WIFEXITED(end.status));
  CHECK(WEXITSTATUS(end.status) == 9);
  CHECK(end.written == "their handler\n");
}
