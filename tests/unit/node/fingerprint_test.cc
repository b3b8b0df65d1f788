#include <catch2/catch.hpp>

#include "daemon/node/fingerprint.h"

using namespace traintl;

TEST_CASE("cgroup cpu.max parsing") {
  CHECK(!ParseCgroupCpuMax("max 100000\n").has_value());
  CHECK(*ParseCgroupCpuMax("150000 100000\n") == Approx(1.5));
  CHECK(*ParseCgroupCpuMax("50000 100000") == Approx(0.5));
  CHECK(!ParseCgroupCpuMax("").has_value());
  CHECK(!ParseCgroupCpuMax("garbage").has_value());
  CHECK(!ParseCgroupCpuMax("-1 100000").has_value());
}

TEST_CASE("fingerprint detects and overrides") {
  NodeResources detected = FingerprintNode({});
  CHECK(detected.cpus >= 1);
  CHECK(detected.memory_bytes > 0);
  FingerprintOverrides o;
  o.num_cpus = 3;
  o.num_gpus = 2;
  o.custom = {{"fast_disk", 1}};
  NodeResources r = FingerprintNode(o);
  CHECK(r.cpus == 3);
  REQUIRE(r.gpus.size() == 2);
  CHECK(r.gpus[1].name == "declared-1");
  auto m = r.AsResourceMap();
  CHECK(m["CPU"] == 3);
  CHECK(m["GPU"] == 2);
  CHECK(m["fast_disk"] == 1);
  CHECK(m["memory"] > 0);
}
