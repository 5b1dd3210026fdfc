// tests/os/numa_test.cpp — os/numa: node_alloc/node_free over sizes, alignments and
// nodes, node counts, blocks churned across threads, and (jemalloc builds) that node
// arenas' pages carry the preferred-node policy and that a node's arena serves that node
// only.

#include "os/numa.hpp"

#include <doctest/doctest.h>
#include <numaif.h>

#ifndef CORUN_NO_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

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

#ifndef CORUN_NO_JEMALLOC
constexpr unsigned kNoArena = ~0u;

// The jemalloc arena that owns p (mallctl "arenas.lookup"); kNoArena if it cannot say.
unsigned arena_of(void* p) {
  unsigned a = kNoArena;
  std::size_t sz = sizeof a;
  if (mallctl("arenas.lookup", &a, &sz, &p, sizeof p) != 0) return kNoArena;
  return a;
}
#endif

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
    // Round 1: each thread allocates kBlocks 64-byte blocks (even threads on node 0, odd
    // ones with no preference) and stamps every byte of each; all are live at once, so a
    // block handed out twice or overlapping another shows as a duplicate address or a
    // broken stamp. Round 2: each thread frees its neighbour's blocks (odd threads free
    // node-0 blocks), then allocates kBlocks again on its own node, from the memory just
    // freed. jemalloc builds also check the arena invariant (numa.hpp): every node-0 block
    // lies in node 0's arena, and no no-preference block does, even one allocated right
    // after the same thread freed node-0 blocks (a free through the thread cache would
    // hand exactly those out again).
    constexpr int kThreads = 4;
    constexpr int kBlocks = 2000;
    auto node_of = [](int t) { return t % 2 == 0 ? 0 : -1; };
    auto stamp = [](int t, int round, int i) {
      return static_cast<unsigned char>(t * 64 + round * 32 + i % 31 + 1);
    };
    std::vector<std::vector<void*>> made(kThreads);
    auto allocate = [&](int t, int round) {
      auto& mine = made[static_cast<std::size_t>(t)];
      mine.clear();
      for (int i = 0; i < kBlocks; ++i) {
        void* p = corun::os::node_alloc(64, 64, node_of(t));
        if (p) std::memset(p, stamp(t, round, i), 64);
        mine.push_back(p);
      }
    };
    auto check_round = [&](int round) {
      std::set<void*> distinct;
      int null = 0, misaligned = 0, broken = 0;
      for (int t = 0; t < kThreads; ++t) {
        for (int i = 0; i < kBlocks; ++i) {
          auto* p = static_cast<unsigned char*>(made[static_cast<std::size_t>(t)][i]);
          if (!p) {
            ++null;
            continue;
          }
          distinct.insert(p);
          misaligned += aligned(p, 64) ? 0 : 1;
          for (int k = 0; k < 64; ++k) {
            if (p[k] != stamp(t, round, i)) {
              ++broken;
              break;
            }
          }
        }
      }
      CAPTURE(round);
      CHECK(null == 0);
      CHECK(misaligned == 0);
      CHECK(broken == 0);  // no two live blocks share a byte
      CHECK(distinct.size() == static_cast<std::size_t>(kThreads * kBlocks - null));
#ifndef CORUN_NO_JEMALLOC
      if (corun::os::node_alloc_binds_pages()) {
        const unsigned node0 = arena_of(made[0][0]);
        int node0_elsewhere = 0, nopref_in_node0 = 0;
        for (int t = 0; t < kThreads; ++t) {
          for (void* p : made[static_cast<std::size_t>(t)]) {
            if (!p) continue;
            if (node_of(t) == 0)
              node0_elsewhere += arena_of(p) != node0 ? 1 : 0;
            else
              nopref_in_node0 += arena_of(p) == node0 ? 1 : 0;
          }
        }
        CHECK(node0 != kNoArena);
        CHECK(node0_elsewhere == 0);
        CHECK(nopref_in_node0 == 0);
      }
#endif
    };

    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) ts.emplace_back([&, t] { allocate(t, 0); });
    for (auto& th : ts) th.join();
    ts.clear();
    check_round(0);

    std::vector<std::vector<void*>> old = made;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t] {
        // Free on a different thread than the allocator, then allocate on this one.
        for (void* p : old[static_cast<std::size_t>((t + 1) % kThreads)])
          corun::os::node_free(p, 64);
        allocate(t, 1);
      });
    }
    for (auto& th : ts) th.join();
    ts.clear();
    check_round(1);
    for (auto& v : made)
      for (void* p : v) corun::os::node_free(p, 64);
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
