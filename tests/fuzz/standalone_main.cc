// A stand-in for libFuzzer's main, for compilers without -fsanitize=fuzzer (GCC builds):
// it runs a libFuzzer-style target (LLVMFuzzerTestOneInput) on every file it is given
// (directories are read, not recursively), then, with -runs=N, on N more inputs derived
// from those by simple deterministic mutations (bit flips, byte edits, insertions of
// tokens that matter to the parsers under test, deletions, duplications, splices). This
// is no coverage-guided fuzzer; it makes the smoke test meaningful where libFuzzer is
// missing, and replays crash files the same way libFuzzer does.
//
// Flags (libFuzzer spelling): -runs=N (default 0), -seed=S (default 1),
// -max_len=N (default 65536), -max_total_time=SECONDS (default: no limit).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

bool ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

void CollectInputs(const std::string& path, std::vector<std::string>* files) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "standalone fuzz driver: cannot stat %s\n", path.c_str());
    std::exit(2);
  }
  if (!S_ISDIR(st.st_mode)) {
    files->push_back(path);
    return;
  }
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    names.push_back(path + "/" + e->d_name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());  // a deterministic order for a deterministic run
  for (const auto& n : names) {
    struct stat s;
    if (::stat(n.c_str(), &s) == 0 && S_ISREG(s.st_mode)) files->push_back(n);
  }
}

const char* const kTokens[] = {
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "\\",
    "\\u0000",
    "\\ud800",
    "null",
    "true",
    "-1",
    "1e309",
    "18446744073709551616",
    "0.5",
    "\xff",
    "\xc3\x28",
    "\xed\xa0\x80",
    "\r\n",
    "\r\n\r\n",
    "%2e%2e",
    "%2F",
    "%00",
    "../",
    "/..",
    "%",
    "?",
    "&",
    "=",
    "Content-Length: ",
    "Transfer-Encoding: chunked\r\n",
    "Authorization: Bearer fuzz-token\r\n",
    "0\r\n\r\n",
    "HTTP/1.0",
    "HTTP/1.1",
    "GET ",
    "POST ",
    "PUT ",
    "HEAD ",
    "\"op\":",
    "\"rid\":",
    "\"type\":",
    "\"seq\":",
    "\"job_id\":",
    "\"attempt\":",
    "\"metrics\":{}",
    "TRC1",
};

std::string Mutate(const std::string& base, const std::vector<std::string>& corpus,
                   std::mt19937_64& rng, size_t max_len) {
  std::string s = base;
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  const int edits = 1 + static_cast<int>(pick(4));
  for (int i = 0; i < edits; ++i) {
    switch (pick(8)) {
      case 0:  // flip a bit
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << pick(8));
        break;
      case 1:  // set a random byte
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng());
        break;
      case 2:  // insert a random byte
        s.insert(s.begin() + static_cast<long>(pick(s.size() + 1)), static_cast<char>(rng()));
        break;
      case 3: {  // delete a range
        if (s.empty()) break;
        size_t at = pick(s.size());
        s.erase(at, 1 + pick(std::min<size_t>(16, s.size() - at)));
        break;
      }
      case 4: {  // duplicate a range
        if (s.empty()) break;
        size_t at = pick(s.size());
        std::string part = s.substr(at, 1 + pick(32));
        s.insert(pick(s.size() + 1), part);
        break;
      }
      case 5:
      case 6: {  // insert a token
        const char* t = kTokens[pick(sizeof(kTokens) / sizeof(kTokens[0]))];
        s.insert(pick(s.size() + 1), t);
        break;
      }
      case 7: {  // splice with another input
        if (corpus.empty()) break;
        const std::string& other = corpus[pick(corpus.size())];
        size_t cut = pick(s.size() + 1);
        size_t from = pick(other.size() + 1);
        s = s.substr(0, cut) + other.substr(from);
        break;
      }
    }
  }
  if (s.size() > max_len) s.resize(max_len);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  long long runs = 0;
  unsigned long long seed = 1;
  size_t max_len = 65536;
  double max_time = 0;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("-runs=", 0) == 0) {
      runs = std::atoll(a.c_str() + 6);
    } else if (a.rfind("-seed=", 0) == 0) {
      seed = std::strtoull(a.c_str() + 6, nullptr, 10);
    } else if (a.rfind("-max_len=", 0) == 0) {
      max_len = static_cast<size_t>(std::atoll(a.c_str() + 9));
    } else if (a.rfind("-max_total_time=", 0) == 0) {
      max_time = std::atof(a.c_str() + 16);
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "standalone fuzz driver: ignoring flag %s\n", a.c_str());
    } else {
      CollectInputs(a, &files);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> corpus;
  for (const auto& f : files) {
    std::string data;
    if (!ReadWholeFile(f, &data)) {
      std::fprintf(stderr, "standalone fuzz driver: cannot read %s\n", f.c_str());
      return 2;
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    corpus.push_back(std::move(data));
  }
  if (corpus.empty()) corpus.push_back("");
  std::mt19937_64 rng(seed);
  long long done = 0;
  for (; done < runs; ++done) {
    if (max_time > 0 && (done & 63) == 0) {
      std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start;
      if (spent.count() >= max_time) break;
    }
    std::string input =
        Mutate(corpus[static_cast<size_t>(rng() % corpus.size())], corpus, rng, max_len);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start;
  std::printf("standalone fuzz driver: %zu file(s) replayed, %lld mutated input(s), %.1f s\n",
              files.size(), done, spent.count());
  return 0;
}
