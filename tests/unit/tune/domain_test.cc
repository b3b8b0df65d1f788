#include "daemon/tune/domain.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

using nlohmann::json;
using traintl::tune::Domain;
using traintl::tune::IsDomain;
using traintl::tune::ParseDomain;
using traintl::tune::Rng;

namespace {

Domain Parse(const json& v) {
  auto d = ParseDomain(v, "param_space.x");
  INFO(v.dump() << ": " << d.status().message());
  REQUIRE(d.ok());
  return *d;
}

std::vector<json> Draws(const Domain& d, int n, uint64_t seed = 7) {
  Rng rng(seed);
  std::vector<json> out;
  for (int i = 0; i < n; ++i) out.push_back(d.Sample(rng));
  return out;
}

std::string Error(const json& v) {
  auto d = ParseDomain(v, "param_space.train_loop_config.lr");
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().code() == traintl::Status::Code::kInvalidArgument);
  return d.status().message();
}

}  // namespace

TEST_CASE("Rng streams are reproducible and independent per seed and index") {
  Rng a(42), b(42), c(43);
  std::vector<uint64_t> va, vb, vc;
  for (int i = 0; i < 8; ++i) {
    va.push_back(a.Next());
    vb.push_back(b.Next());
    vc.push_back(c.Next());
  }
  CHECK(va == vb);
  CHECK(va != vc);

  std::set<uint64_t> firsts;
  for (uint64_t i = 0; i < 1000; ++i) firsts.insert(Rng::ForIndex(42, i).Next());
  CHECK(firsts.size() == 1000);
  CHECK(Rng::ForIndex(42, 5).Next() == Rng::ForIndex(42, 5).Next());
  CHECK(Rng::ForIndex(42, 5).Next() != Rng::ForIndex(43, 5).Next());
}

TEST_CASE("Rng transforms stay in range with the right moments") {
  Rng rng(1);
  const int n = 20000;
  double sum = 0, nsum = 0, nsq = 0;
  std::vector<int> counts(7, 0);
  for (int i = 0; i < n; ++i) {
    double u = rng.Uniform01();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
    double z = rng.Normal();
    REQUIRE(std::isfinite(z));
    nsum += z;
    nsq += z * z;
    uint64_t k = rng.Below(7);
    REQUIRE(k < 7);
    ++counts[k];
  }
  CHECK(sum / n == Approx(0.5).margin(0.01));
  CHECK(nsum / n == Approx(0.0).margin(0.03));
  CHECK(nsq / n == Approx(1.0).margin(0.04));
  for (int c : counts) CHECK(c == Approx(n / 7.0).epsilon(0.1));
  CHECK(rng.Below(1) == 0);
  // Near 2^64 the rejection threshold matters: the draw must still be in range.
  const uint64_t big = (uint64_t{1} << 63) + 12345;
  for (int i = 0; i < 100; ++i) CHECK(rng.Below(big) < big);
}

TEST_CASE("uniform and loguniform draw floats in their half-open ranges") {
  for (const json& v : Draws(Parse({{"uniform", {-2, 3}}}), 2000)) {
    REQUIRE(v.is_number_float());
    CHECK(v.get<double>() >= -2.0);
    CHECK(v.get<double>() < 3.0);
  }
  std::vector<double> xs;
  for (const json& v : Draws(Parse({{"loguniform", {1e-4, 1e-1}}}), 2000)) {
    REQUIRE(v.is_number_float());
    xs.push_back(v.get<double>());
    CHECK(xs.back() >= 1e-4);
    CHECK(xs.back() < 1e-1);
  }
  // Log-uniform: the median sits at the geometric middle, 10^-2.5, not near 0.05.
  std::nth_element(xs.begin(), xs.begin() + 1000, xs.end());
  CHECK(std::log10(xs[1000]) == Approx(-2.5).margin(0.1));
}

TEST_CASE("quantized domains return multiples of q and integers when q is one") {
  for (const json& v : Draws(Parse({{"quniform", {0, 100, 5}}}), 500)) {
    REQUIRE(v.is_number_integer());
    CHECK(v.get<int64_t>() % 5 == 0);
    CHECK(v.get<int64_t>() >= 0);
    CHECK(v.get<int64_t>() <= 100);
  }
  for (const json& v : Draws(Parse({{"quniform", {0, 1, 0.25}}}), 500)) {
    REQUIRE(v.is_number_float());
    double k = v.get<double>() / 0.25;
    CHECK(k == Approx(std::round(k)).margin(1e-9));
  }
  std::set<int64_t> seen;
  for (const json& v : Draws(Parse({{"qloguniform", {1, 1000, 1}}}), 500)) {
    REQUIRE(v.is_number_integer());
    CHECK(v.get<int64_t>() >= 1);
    CHECK(v.get<int64_t>() <= 1000);
    seen.insert(v.get<int64_t>());
  }
  CHECK(seen.count(1) + seen.count(2) + seen.count(3) > 0);  // log scale favours small values
}

TEST_CASE("randint returns integers from lo up to hi excluded and hits both ends") {
  std::set<int64_t> seen;
  for (const json& v : Draws(Parse({{"randint", {-2, 3}}}), 500)) {
    REQUIRE(v.is_number_integer());
    seen.insert(v.get<int64_t>());
  }
  CHECK(seen == std::set<int64_t>{-2, -1, 0, 1, 2});
}

TEST_CASE("randn has the given mean and sd") {
  double sum = 0, sq = 0;
  auto draws = Draws(Parse({{"randn", {10, 2}}}), 5000);
  for (const json& v : draws) {
    sum += v.get<double>();
    sq += v.get<double>() * v.get<double>();
  }
  double mean = sum / 5000;
  CHECK(mean == Approx(10).margin(0.15));
  CHECK(std::sqrt(sq / 5000 - mean * mean) == Approx(2).margin(0.15));
}

TEST_CASE("choice picks every value whatever its JSON type") {
  json values = {1, "two", {{"three", 3}}, nullptr};
  std::set<std::string> seen;
  for (const json& v : Draws(Parse({{"choice", values}}), 200)) seen.insert(v.dump());
  CHECK(seen == std::set<std::string>{"1", "\"two\"", R"({"three":3})", "null"});
}

TEST_CASE("ToJson gives a domain back as written") {
  for (const char* text :
       {R"({"uniform":[0,1]})", R"({"quniform":[0.5,10.5,0.5]})", R"({"loguniform":[0.0001,0.1]})",
        R"({"qloguniform":[1,1000,1]})", R"({"randint":[1,10]})", R"({"randn":[0,1.5]})",
        R"({"choice":["a",{"b":1}]})", R"({"grid_search":[1,2,3]})"}) {
    CHECK(Parse(json::parse(text)).ToJson().dump() == text);
  }
}

TEST_CASE("ParseDomain names the path and what is wrong") {
  using Catch::Contains;
  CHECK_THAT(Error({{"uniform", {1}}}),
             Contains("param_space.train_loop_config.lr: uniform needs [lo, hi]"));
  CHECK_THAT(Error({{"uniform", {"a", 1}}}), Contains("uniform needs [lo, hi]"));
  CHECK_THAT(Error({{"uniform", 5}}), Contains("uniform needs [lo, hi]"));
  CHECK_THAT(Error({{"uniform", {1, 1}}}), Contains("uniform needs lo < hi"));
  CHECK_THAT(Error({{"quniform", {0, 1}}}), Contains("quniform needs [lo, hi, q]"));
  CHECK_THAT(Error({{"quniform", {0, 1, 0}}}), Contains("quniform needs q > 0"));
  CHECK_THAT(Error({{"loguniform", {0, 1}}}), Contains("loguniform needs 0 < lo < hi"));
  CHECK_THAT(Error({{"qloguniform", {1, 10, -1}}}), Contains("qloguniform needs q > 0"));
  CHECK_THAT(Error({{"randint", {0.5, 3}}}), Contains("randint needs integer bounds"));
  CHECK_THAT(Error({{"randint", {3, 3}}}), Contains("randint needs lo < hi"));
  CHECK_THAT(Error({{"randn", {0, 0}}}), Contains("randn needs sd > 0"));
  CHECK_THAT(Error({{"randn", {0}}}), Contains("randn needs [mean, sd]"));
  CHECK_THAT(Error({{"choice", json::array()}}), Contains("choice needs a non-empty list"));
  CHECK_THAT(Error({{"grid_search", 3}}), Contains("grid_search needs a non-empty list"));
  CHECK_THAT(Error({{"logunifrm", {1e-4, 0.1}}}),
             Contains("param_space.train_loop_config.lr: unknown distribution \"logunifrm\" "
                      "(did you mean \"loguniform\"?)"));
  CHECK_THAT(Error({{"qrandint", {1, 10, 2}}}),
             Contains("distribution \"qrandint\" is not supported (supported: uniform, "
                      "quniform, loguniform"));
  CHECK_THAT(Error({{"sample_from", {1}}}), Contains("\"sample_from\" is not supported"));
  CHECK_THAT(Error(json{{"uniform", {0, 1}}, {"choice", {1}}}),
             Contains("param_space.train_loop_config.lr: must be a distribution"));
}

TEST_CASE("IsDomain: single-key objects naming a distribution or a near miss of one") {
  CHECK(IsDomain({{"uniform", {0, 1}}}));
  CHECK(IsDomain({{"grid_search", {1}}}));
  CHECK(IsDomain({{"uniform", 5}}));  // a known name always: its error beats silence
  CHECK(IsDomain({{"qrandint", {1, 10, 2}}}));
  CHECK(IsDomain({{"logunifrm", {0, 1}}}));
  CHECK(IsDomain({{"Choice", {1, 2}}}));

  CHECK_FALSE(IsDomain({{"logunifrm", 0.5}}));  // a near miss counts only with a list
  CHECK_FALSE(IsDomain({{"layers", {64, 32}}}));
  CHECK_FALSE(IsDomain({{"uniform", {0, 1}}, {"lr", 1}}));
  CHECK_FALSE(IsDomain(json::object()));
  CHECK_FALSE(IsDomain(json::array({json{{"uniform", {0, 1}}}})));
  CHECK_FALSE(IsDomain("uniform"));
}
