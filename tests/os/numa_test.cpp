// Tests for os/numa: node_alloc/node_free over sizes, alignments and nodes, node counts, and
// (jemalloc builds) that node arenas' pages carry the preferred-node policy.

#include "os/numa.hpp"

#include <doctest/doctest.h>
#include <numaif.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace {

bool aligned(const void* p, std::size_t a) {
  return reinterpret_cast<std::uintptr_t>(p) % a == 0;
}

}  // namespace

TEST_SUITE("unit.os.numa") {
  TEST_CASE("node counts") {
    const int n = corun::os::numa_node_count();
    CHECK(n >= 1);
    CHECK(corun::os::numa_node_count() == n);  // stable
    const int cur = corun::os::current_numa_node();
    CHECK(cur >= 0);
    CHECK(cur < n);
  }

  TEST_CASE("alloc/free many sizes and alignments on node 0, the current node and -1") {
    const int nodes[] = {0, -1, corun::os::current_numa_node()};
    const std::size_t sizes[] = {0,   1,    7,    8,    63,    64,      65,
                                 100, 4095, 4096, 4097, 65536, 1 << 20, (3 << 20) + 5};
    const std::size_t aligns[] = {0, 1, 8, 16, 64, 128, 4096, 1 << 16};
    std::vector<std::pair<void*, std::size_t>> live;
    for (int node : nodes) {
      for (std::size_t size : sizes) {
        for (std::size_t align : aligns) {
          void* p = corun::os::node_alloc(size, align, node);
          REQUIRE(p != nullptr);
          CHECK(aligned(p, align == 0 ? alignof(std::max_align_t) : align));
          if (size > 0) {
            std::memset(p, 0xa5, size);  // the whole block is writable
            CHECK(static_cast<unsigned char*>(p)[size - 1] == 0xa5);
          }
          live.emplace_back(p, size);
        }
      }
    }
    std::set<void*> distinct;
    for (auto& [p, s] : live) distinct.insert(p);
    CHECK(distinct.size() == live.size());
    for (auto& [p, s] : live) corun::os::node_free(p, s);
    corun::os::node_free(nullptr, 0);
  }

  TEST_CASE("cache-line blocks churn across threads (each P allocates, another frees)") {
    constexpr int kThreads = 4;
    constexpr int kBlocks = 2000;
    std::vector<std::vector<void*>> made(kThreads);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&made, t] {
        for (int i = 0; i < kBlocks; ++i) {
          void* p = corun::os::node_alloc(64, 64, t % 2 == 0 ? 0 : -1);
          static_cast<char*>(p)[0] = static_cast<char>(i);
          made[static_cast<std::size_t>(t)].push_back(p);
        }
      });
    }
    for (auto& th : ts) th.join();
    ts.clear();
    for (int t = 0; t < kThreads; ++t) {  // free on a different thread than the allocator
      ts.emplace_back([&made, t] {
        for (void* p : made[static_cast<std::size_t>((t + 1) % kThreads)])
          corun::os::node_free(p, 64);
      });
    }
    for (auto& th : ts) th.join();
  }

  TEST_CASE("node arenas' pages prefer their node") {
    if (!corun::os::node_alloc_binds_pages()) {
      MESSAGE("node_alloc does not bind pages in this build (CORUN_NO_JEMALLOC or no libnuma)");
      return;
    }
    // Large enough for its own extent; the policy is on the range, before any touch.
    const std::size_t size = 4 << 20;
    void* p = corun::os::node_alloc(size, 4096, 0);
    int mode = -1;
    unsigned long mask[1024 / (8 * sizeof(unsigned long)) + 1] = {};
    REQUIRE(get_mempolicy(&mode, mask, 1024 + 1, p, MPOL_F_ADDR) == 0);
    CHECK(mode == MPOL_PREFERRED);
    CHECK((mask[0] & 1ul) == 1ul);
    corun::os::node_free(p, size);

    void* q = corun::os::node_alloc(size, 4096, -1);  // no preference: default policy
    REQUIRE(get_mempolicy(&mode, mask, 1024 + 1, q, MPOL_F_ADDR) == 0);
    CHECK(mode == MPOL_DEFAULT);
    corun::os::node_free(q, size);
  }

  TEST_CASE("bad arguments name what is accepted") {
    try {
      (void)corun::os::node_alloc(64, 48, 0);
      FAIL("align 48 accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find("48") != std::string::npos);
    }
    const int n = corun::os::numa_node_count();
    try {
      (void)corun::os::node_alloc(64, 64, n);
      FAIL("node out of range accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(std::to_string(n)) != std::string::npos);
    }
  }
}
