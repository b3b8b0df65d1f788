// Data files for the traintl::xgboost tests.
//
// Thread-safety: test code, one thread.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace traintl {
namespace xgboost_test {

inline std::string MakeTempDir() {
  char tmpl[] = "/tmp/traintl-xgboost-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  if (!f.flush()) throw std::runtime_error("cannot write " + path);
}

struct Row {
  double f[3];
  int64_t count;  // 1..5: also usable as a weight
  std::string name;
  int label;
};

// `n` rows of a binary classification problem with columns f0,f1,f2 (floats), count (an
// integer), name (text) and label (0/1: whether f0 + f1 / 2 - f2 > 0, flipped for about
// `flip_percent` percent of the rows), deterministic for `seed`. Returns the rows as
// written (the values round-trip through "%.9g").
inline std::vector<Row> WriteClassificationCsv(const std::string& path, int n, uint64_t seed,
                                               int flip_percent = 5) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] {  // splitmix64
    s += 0x9E3779B97F4A7C15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  auto uniform = [&] { return static_cast<double>(next() >> 11) / 9007199254740992.0 * 2 - 1; };
  std::vector<Row> rows;
  std::string text = "f0,f1,f2,count,name,label\n";
  char buf[256];
  for (int i = 0; i < n; ++i) {
    Row r;
    for (double& v : r.f) {
      std::snprintf(buf, sizeof buf, "%.9g", uniform());
      v = std::strtod(buf, nullptr);
    }
    r.count = static_cast<int64_t>(next() % 5) + 1;
    r.name = "r" + std::to_string(i);
    r.label = r.f[0] + r.f[1] / 2 - r.f[2] > 0 ? 1 : 0;
    if (static_cast<int>(next() % 100) < flip_percent) r.label = 1 - r.label;
    std::snprintf(buf, sizeof buf, "%.9g,%.9g,%.9g,%lld,%s,%d\n", r.f[0], r.f[1], r.f[2],
                  static_cast<long long>(r.count), r.name.c_str(), r.label);
    text += buf;
    rows.push_back(r);
  }
  WriteText(path, text);
  return rows;
}

}  // namespace xgboost_test
}  // namespace traintl
