// tests/os/topology_test.cpp — os/topology: P placement and nearest-first victim order on
// the machine the tests run on and on hwloc synthetic/XML topologies (a build machine
// usually has one socket and one NUMA node, so multi-socket logic is only reachable
// through those; tests/os/fixtures/ holds the XML).

#include "os/topology.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

using corun::os::plan_topology;
using corun::os::TopologyPlan;
using corun::os::TopologyRequest;

std::string fixture(const char* name) {
#ifdef CORUN_SOURCE_DIR
  return std::string(CORUN_SOURCE_DIR) + "/tests/os/fixtures/" + name;
#else
  return std::string("tests/os/fixtures/") + name;
#endif
}

TopologyPlan synthetic(const char* desc, int procs = 0, bool numa = true) {
  TopologyRequest r;
  r.synthetic = desc;
  r.procs = procs;
  r.numa = numa;
  return plan_topology(r);
}

// Every P's victims in visiting order.
std::vector<std::vector<int>> all_victims(const TopologyPlan& plan) {
  std::vector<std::vector<int>> out;
  for (size_t p = 0; p < plan.procs.size(); ++p) out.push_back(plan.victims(static_cast<int>(p)));
  return out;
}

// victims(p) is a permutation of every P but p.
void check_permutations(const TopologyPlan& plan) {
  const int n = static_cast<int>(plan.procs.size());
  for (int p = 0; p < n; ++p) {
    std::vector<int> v = plan.victims(p);
    REQUIRE(v.size() == static_cast<size_t>(n - 1));
    std::sort(v.begin(), v.end());
    std::vector<int> want;
    for (int q = 0; q < n; ++q)
      if (q != p) want.push_back(q);
    CHECK(v == want);
  }
}

// The set of NUMA nodes of Ps victims(p)[from, to).
std::set<int> nodes_of(const TopologyPlan& plan, int p, size_t from, size_t to) {
  std::set<int> s;
  const std::vector<int> v = plan.victims(p);
  for (size_t k = from; k < to && k < v.size(); ++k)
    s.insert(plan.procs[static_cast<size_t>(v[k])].numa_node);
  return s;
}

std::set<int> packages_of(const TopologyPlan& plan, int p, size_t from, size_t to) {
  std::set<int> s;
  const std::vector<int> v = plan.victims(p);
  for (size_t k = from; k < to && k < v.size(); ++k)
    s.insert(plan.procs[static_cast<size_t>(v[k])].package);
  return s;
}

// The steal order as it was first written: every P's full list, sorted by the key
// (tier, other package, rotation) over all pairs — O(procs^2 log procs), fine at test sizes.
// Without a latency matrix (synthetic topologies) the grouped plan must give exactly this.
std::vector<std::vector<int>> reference_victims(const TopologyPlan& plan) {
  const int n = static_cast<int>(plan.procs.size());
  auto shared = [](int a, int b) { return a >= 0 && a == b; };
  std::vector<std::vector<int>> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto& a = plan.procs[static_cast<size_t>(i)];
    std::vector<std::tuple<int, int, int, int>> keys;  // (tier, other pkg, rotation, j)
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      const auto& b = plan.procs[static_cast<size_t>(j)];
      const int tier = a.pu == b.pu                       ? 0
                       : shared(a.core, b.core)           ? 1
                       : shared(a.l2, b.l2)               ? 2
                       : shared(a.l3, b.l3)               ? 3
                       : shared(a.numa_node, b.numa_node) ? 4
                                                          : 5;
      const int other = a.package >= 0 && b.package >= 0 && a.package != b.package;
      keys.emplace_back(tier, other, j > i ? j - i : j - i + n, j);
    }
    std::sort(keys.begin(), keys.end());
    for (const auto& k : keys) out[static_cast<size_t>(i)].push_back(std::get<3>(k));
  }
  return out;
}

size_t stored_ids(const TopologyPlan& plan) {
  size_t n = 0;
  for (const auto& g : plan.groups) n += g.size();
  return n;
}

}  // namespace

TEST_SUITE("unit.os.topology") {
  TEST_CASE("this machine: one P per CPU of the affinity mask, pinnable") {
    const int hw = corun::os::hardware_threads_in_affinity_mask();
    CHECK(hw >= 1);
    const TopologyPlan plan = plan_topology({});
    CHECK(plan.pus == hw);
    CHECK(plan.procs.size() == static_cast<size_t>(hw));
    CHECK(plan.pinnable);
    CHECK(plan.numa_nodes >= 1);
    check_permutations(plan);
    std::set<int> cpus;
    for (const auto& p : plan.procs) {
      CHECK(p.os_cpu >= 0);
      CHECK(p.pu >= 0);
      cpus.insert(p.os_cpu);
    }
    CHECK(cpus.size() == plan.procs.size());
    CHECK(plan.describe().find("pinnable") != std::string::npos);

    // A second call reuses the cached topology and agrees.
    const TopologyPlan again = plan_topology({});
    CHECK(all_victims(again) == all_victims(plan));
  }

  TEST_CASE("pin_current_thread pins to a CPU of the plan and rejects bad CPUs") {
    const TopologyPlan plan = plan_topology({});
    const int cpu = plan.procs.back().os_cpu;
    int rc = -1;
    int hw_after = 0;
    std::thread th([&] {  // a fresh thread: the test runner's mask stays untouched
      rc = corun::os::pin_current_thread(cpu);
      hw_after = corun::os::hardware_threads_in_affinity_mask();
    });
    th.join();
    CHECK(rc == 0);
    CHECK(hw_after == 1);
    CHECK(corun::os::pin_current_thread(-1) == EINVAL);
  }

  TEST_CASE("2 packages x 2 NUMA nodes x 8 cores: own node, then package, then other") {
    const TopologyPlan plan = synthetic("pack:2 numa:2 core:8 pu:1");
    REQUIRE(plan.procs.size() == 32);
    CHECK(plan.pus == 32);
    CHECK(plan.numa_nodes == 4);
    CHECK_FALSE(plan.pinnable);
    CHECK_FALSE(plan.numa_distances_used);  // synthetic topologies carry no matrix
    check_permutations(plan);
    for (int p : {0, 5, 17, 31}) {
      const int node = plan.procs[static_cast<size_t>(p)].numa_node;
      const int pkg = plan.procs[static_cast<size_t>(p)].package;
      CHECK(nodes_of(plan, p, 0, 7) == std::set<int>{node});
      const std::set<int> next = nodes_of(plan, p, 7, 15);
      CHECK(next.size() == 1);
      CHECK(*next.begin() != node);
      CHECK(packages_of(plan, p, 7, 15) == std::set<int>{pkg});
      CHECK(packages_of(plan, p, 15, 31) == std::set<int>{1 - pkg});
    }
    // Rotation: P0 tries 1, 2, ... first; P5 tries 6, 7, 0 within its node.
    CHECK(plan.victims(0)[0] == 1);
    const std::vector<int> v5 = plan.victims(5);
    const std::vector<int> p5(v5.begin(), v5.begin() + 7);
    CHECK(p5 == std::vector<int>{6, 7, 0, 1, 2, 3, 4});
  }

  TEST_CASE("SMT: the sibling comes first, each core gets a P before any sibling") {
    const TopologyPlan plan = synthetic("pack:2 core:4 pu:2");
    REQUIRE(plan.procs.size() == 16);
    check_permutations(plan);
    for (size_t p = 0; p < plan.procs.size(); ++p) {
      const int first = plan.victims(static_cast<int>(p))[0];
      CHECK(plan.procs[static_cast<size_t>(first)].core == plan.procs[p].core);
      CHECK(plan.procs[static_cast<size_t>(first)].pu != plan.procs[p].pu);
    }
    // P0..P7 take the 8 cores, P8..P15 their siblings.
    std::set<int> cores;
    for (size_t p = 0; p < 8; ++p) cores.insert(plan.procs[p].core);
    CHECK(cores.size() == 8);
    // After the sibling: the rest of the package, then the other package.
    const int pkg = plan.procs[0].package;
    CHECK(packages_of(plan, 0, 1, 7) == std::set<int>{pkg});
    CHECK(packages_of(plan, 0, 7, 15) == std::set<int>{1 - pkg});
    // With 4 Ps: one per core, all in package 0, no SMT sibling used.
    const TopologyPlan four = synthetic("pack:2 core:4 pu:2", 4);
    std::set<int> four_cores;
    for (const auto& pl : four.procs) {
      four_cores.insert(pl.core);
      CHECK(pl.package == 0);
    }
    CHECK(four_cores.size() == 4);
  }

  TEST_CASE("caches: shared L2 before shared L3 before the rest of the node") {
    const TopologyPlan plan = synthetic("pack:2 numa:1 l3:2 l2:2 core:2 pu:1");
    REQUIRE(plan.procs.size() == 16);
    check_permutations(plan);
    const auto& pl = plan.procs;
    const std::vector<int> v = plan.victims(0);
    CHECK(pl[static_cast<size_t>(v[0])].l2 == pl[0].l2);
    CHECK(pl[static_cast<size_t>(v[0])].l3 == pl[0].l3);
    for (size_t k = 1; k < 3; ++k) {
      CHECK(pl[static_cast<size_t>(v[k])].l2 != pl[0].l2);
      CHECK(pl[static_cast<size_t>(v[k])].l3 == pl[0].l3);
    }
    for (size_t k = 3; k < 7; ++k) {
      CHECK(pl[static_cast<size_t>(v[k])].l3 != pl[0].l3);
      CHECK(pl[static_cast<size_t>(v[k])].numa_node == pl[0].numa_node);
    }
  }

  TEST_CASE("oversubscription: P i and P i+32 share a PU and steal from each other first") {
    const TopologyPlan plan = synthetic("pack:2 numa:2 core:8 pu:1", 64);
    REQUIRE(plan.procs.size() == 64);
    CHECK(plan.pus == 32);
    check_permutations(plan);
    for (int i = 0; i < 32; ++i) {
      CHECK(plan.procs[static_cast<size_t>(i)].pu == plan.procs[static_cast<size_t>(i + 32)].pu);
      CHECK(plan.victims(i)[0] == i + 32);
      CHECK(plan.victims(i + 32)[0] == i);
    }
  }

  TEST_CASE("XML with a NUMA latency matrix: node 0's nearest other node is 2, not 1") {
    TopologyRequest r;
    r.xml_path = fixture("numa4_distances.xml");
    const TopologyPlan plan = plan_topology(r);
    REQUIRE(plan.procs.size() == 16);
    CHECK(plan.numa_nodes == 4);
    CHECK(plan.numa_distances_used);
    CHECK_FALSE(plan.pinnable);
    check_permutations(plan);
    REQUIRE(plan.procs[0].numa_node == 0);
    CHECK(nodes_of(plan, 0, 0, 3) == std::set<int>{0});
    CHECK(nodes_of(plan, 0, 3, 7) == std::set<int>{2});    // latency 12, other package
    CHECK(nodes_of(plan, 0, 7, 11) == std::set<int>{1});   // 21
    CHECK(nodes_of(plan, 0, 11, 15) == std::set<int>{3});  // 31
    CHECK(plan.describe().find("latency matrix") != std::string::npos);

    SUBCASE("numa=false ignores the matrix and the nodes: package order only") {
      r.numa = false;
      const TopologyPlan off = plan_topology(r);
      CHECK_FALSE(off.numa_distances_used);
      CHECK(off.numa_nodes == 1);
      for (const auto& pl : off.procs) CHECK(pl.numa_node == -1);
      CHECK(packages_of(off, 0, 0, 7) == std::set<int>{off.procs[0].package});
      // Package 0 in rotation order: node 1's Ps are no longer behind node 2's.
      const std::vector<int> v0 = off.victims(0);
      const std::vector<int> first(v0.begin(), v0.begin() + 7);
      CHECK(first == std::vector<int>{1, 2, 3, 4, 5, 6, 7});
    }
  }

  TEST_CASE("numa=false on a synthetic topology orders the package by rotation only") {
    const TopologyPlan plan = synthetic("pack:2 numa:2 core:8 pu:1", 0, false);
    check_permutations(plan);
    const std::vector<int> v3 = plan.victims(3);
    const std::vector<int> p3(v3.begin(), v3.begin() + 15);
    CHECK(p3 == std::vector<int>{4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2});
  }

  TEST_CASE("2 sockets x 64 cores with SMT (256 Ps) plans quickly and sensibly") {
    const TopologyPlan plan = synthetic("pack:2 numa:4 l3:2 core:8 pu:2");
    REQUIRE(plan.procs.size() == 256);
    CHECK(plan.numa_nodes == 8);
    const auto& pl = plan.procs;
    // P0..P127: one per core; package 0 first.
    for (size_t p = 0; p < 64; ++p) CHECK(pl[p].package == 0);
    const std::vector<int> v = plan.victims(0);
    CHECK(pl[static_cast<size_t>(v[0])].core == pl[0].core);  // SMT sibling
    for (size_t k = 1; k < 15; ++k) CHECK(pl[static_cast<size_t>(v[k])].l3 == pl[0].l3);
    for (size_t k = 15; k < 31; ++k) {
      CHECK(pl[static_cast<size_t>(v[k])].l3 != pl[0].l3);
      CHECK(pl[static_cast<size_t>(v[k])].numa_node == pl[0].numa_node);
    }
    CHECK(nodes_of(plan, 0, 31, 127).count(pl[0].numa_node) == 0);
    CHECK(packages_of(plan, 0, 31, 127) == std::set<int>{pl[0].package});
    CHECK(packages_of(plan, 0, 127, 255) == std::set<int>{1 - pl[0].package});
    CHECK(plan.describe().size() > 0);
  }

  TEST_CASE("the distance groups give exactly the sorted full order, at any P count") {
    struct Case {
      const char* desc;
      int procs;
      bool numa;
    };
    const Case cases[] = {
        {"pack:2 numa:2 core:8 pu:1", 0, true},
        {"pack:2 numa:2 core:8 pu:1", 5, true},
        {"pack:2 numa:2 core:8 pu:1", 64, true},
        {"pack:2 numa:2 core:8 pu:1", 100, true},
        {"pack:2 numa:2 core:8 pu:1", 0, false},
        {"pack:2 core:4 pu:2", 0, true},
        {"pack:2 core:4 pu:2", 4, true},
        {"pack:2 core:4 pu:2", 40, true},
        {"pack:2 numa:1 l3:2 l2:2 core:2 pu:1", 0, true},
        {"pack:2 numa:4 l3:2 core:8 pu:2", 0, true},
        {"pack:2 numa:4 l3:2 core:8 pu:2", 300, false},
        {"core:3 pu:1", 7, true},
        {"pu:1", 3, true},
    };
    for (const Case& c : cases) {
      INFO(c.desc, " procs ", c.procs, " numa ", c.numa);
      const TopologyPlan plan = synthetic(c.desc, c.procs, c.numa);
      CHECK(all_victims(plan) == reference_victims(plan));
      // Each P's groups are non-empty, walk from the first id above it, and hold it at most
      // in the first (same-PU) group.
      for (size_t p = 0; p < plan.procs.size(); ++p) {
        const auto groups = plan.victim_groups(static_cast<int>(p));
        for (size_t g = 0; g < groups.size(); ++g) {
          REQUIRE(groups[g].n > 0);
          const int* ids = groups[g].ids;
          CHECK(std::is_sorted(ids, ids + groups[g].n));
          CHECK(std::count(ids, ids + groups[g].n, static_cast<int>(p)) <= (g == 0 ? 1 : 0));
        }
      }
    }
    CHECK(plan_topology({}).victims(-1).empty());
    CHECK(plan_topology({}).victim_groups(1 << 20).empty());
  }

  TEST_CASE("2 sockets x 64 cores x SMT: sibling, then own package, then the other") {
    // hwloc's synthetic stand-in for a 2 x 64-core EPYC with SMT in NPS1 (one NUMA node per
    // socket, no cache levels given): 256 PUs, P0..P127 one per core, P128..P255 siblings.
    const TopologyPlan plan = synthetic("pack:2 numa:1 core:64 pu:2");
    REQUIRE(plan.procs.size() == 256);
    const auto& pl = plan.procs;
    for (int p : {0, 1, 63, 64, 127, 128, 200, 255}) {
      INFO("P", p);
      const auto groups = plan.victim_groups(p);
      REQUIRE(groups.size() == 3);
      CHECK(groups[0].n == 1);    // the SMT sibling
      CHECK(groups[1].n == 126);  // the rest of the package (= its NUMA node)
      CHECK(groups[2].n == 128);  // the other package
      const std::vector<int> v = plan.victims(p);
      REQUIRE(v.size() == 255);
      const auto& me = pl[static_cast<size_t>(p)];
      CHECK(pl[static_cast<size_t>(v[0])].core == me.core);
      CHECK(v[0] == (p < 128 ? p + 128 : p - 128));
      for (size_t k = 1; k < 127; ++k) {
        CHECK(pl[static_cast<size_t>(v[k])].package == me.package);
        CHECK(pl[static_cast<size_t>(v[k])].core != me.core);
      }
      for (size_t k = 127; k < 255; ++k) CHECK(pl[static_cast<size_t>(v[k])].package != me.package);
      // Rotation within a group: the package group starts at the next id above p (P255
      // has none above it in its package: it wraps to the lowest).
      if (p != 255) CHECK(v[1] > p);
    }
    // Stored once per distinct group, not once per P: far below procs^2.
    CHECK(stored_ids(plan) < 256 * 80);

    SUBCASE("at 4096 Ps (16 per PU) the order stays nearest-first and small") {
      const TopologyPlan big = synthetic("pack:2 numa:1 core:64 pu:2", 4096);
      REQUIRE(big.procs.size() == 4096);
      CHECK(stored_ids(big) < size_t{4096} * 80);  // procs^2 would be 4096 * 4096
      for (int p : {0, 129, 4095}) {
        INFO("P", p);
        const std::vector<int> v = big.victims(p);
        REQUIRE(v.size() == 4095);
        std::vector<int> sorted = v;
        std::sort(sorted.begin(), sorted.end());
        CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
        const auto& me = big.procs[static_cast<size_t>(p)];
        size_t k = 0;
        for (; k < 15; ++k) CHECK(big.procs[static_cast<size_t>(v[k])].pu == me.pu);
        for (; k < 31; ++k) {
          CHECK(big.procs[static_cast<size_t>(v[k])].core == me.core);
          CHECK(big.procs[static_cast<size_t>(v[k])].pu != me.pu);
        }
        for (; k < 2047; ++k) {
          CHECK(big.procs[static_cast<size_t>(v[k])].package == me.package);
          CHECK(big.procs[static_cast<size_t>(v[k])].core != me.core);
        }
        for (; k < 4095; ++k) CHECK(big.procs[static_cast<size_t>(v[k])].package != me.package);
      }
    }
  }

  TEST_CASE("concurrent planners agree") {
    const TopologyPlan want_real = plan_topology({});
    const TopologyPlan want_syn = synthetic("pack:2 core:4 pu:2");
    std::vector<std::thread> ts;
    std::vector<int> ok(4, 0);
    for (int t = 0; t < 4; ++t) {
      ts.emplace_back([&, t] {
        bool same = true;
        for (int k = 0; k < 5; ++k) {
          if (t % 2 == 0)
            same = same && all_victims(plan_topology({})) == all_victims(want_real);
          else
            same = same && all_victims(synthetic("pack:2 core:4 pu:2")) == all_victims(want_syn);
        }
        ok[static_cast<size_t>(t)] = same;
      });
    }
    for (auto& th : ts) th.join();
    CHECK(ok == std::vector<int>(4, 1));
  }

  TEST_CASE("errors name what was wrong") {
    TopologyRequest bad;
    bad.synthetic = "pack:2 bogus:3";
    try {
      plan_topology(bad);
      FAIL("bad synthetic string accepted");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()).find("pack:2 bogus:3") != std::string::npos);
    }
    TopologyRequest missing;
    missing.xml_path = "/nonexistent/corun-topology.xml";
    try {
      plan_topology(missing);
      FAIL("missing XML accepted");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()).find("/nonexistent/corun-topology.xml") != std::string::npos);
    }
    TopologyRequest neg;
    neg.procs = -2;
    CHECK_THROWS_AS(plan_topology(neg), std::runtime_error);
  }
}
