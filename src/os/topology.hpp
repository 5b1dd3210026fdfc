// os/topology: where each P runs and whom it steals from, computed from hwloc.
//
// corun runs one P (logical processor) per hardware thread (PU) of the affinity mask of the
// thread that calls plan_topology(); each P's M is pinned to its PU (CORUN_PIN=on), and an
// idle P steals from the other Ps nearest first. This file turns the machine's topology
// (hwloc 2.x) into that plan; it never pins anything itself except via pin_current_thread().
//
// P -> PU placement. The usable PUs (affinity mask of the calling thread, intersected with
// hwloc's allowed cpuset; all PUs for synthetic/XML topologies) are ordered "one PU per core
// first": every core's first PU in hwloc logical order, then every core's second PU, ...
// P i gets PU order[i mod n]. So with procs <= cores each P has a core to itself (no SMT
// sibling shares its execution units), Ps fill package 0 before package 1 (memory stays on
// few nodes), and procs > n oversubscribes round-robin: P i and P i+n share a PU.
//
// Victim order. P i's victims are every other P exactly once, sorted by the key
//   (tier, NUMA latency, other package, rotation (j - i) mod nprocs)
// with tiers, nearest first:
//   0 same PU (only under oversubscription)   1 same core (SMT sibling)
//   2 shared L2                               3 shared L3
//   4 same NUMA node                          5 everything else.
// NUMA latency only orders tier 5, and only with CORUN_NUMA on and a latency matrix
// (hwloc_distances_get_by_type NUMANODE, kind MEANS_LATENCY; on Linux the ACPI SLIT from
// sysfs): the row is the thief's node, as it reads the victim's queue on the victim's node.
// "Other package" puts the own package first within every tier: it is the whole order of
// tier 5 without a matrix, breaks equal latencies with one, and splits tier 4 when BIOS node
// interleaving makes one NUMA node of both sockets. Tie rules: an unknown level (-1: hwloc
// has no such object, e.g. no L2 in a synthetic topology) is never "shared"; an unknown
// package never counts as "other". Keys equal up to the rotation fall to the rotation, so P
// i tries i+1, i+2, ... first: the thieves of one tier spread over it instead of all hitting
// its lowest-numbered P. With numa=false (CORUN_NUMA=off) tier 4 and the matrix are ignored
// (cache/core/package only) and numa_node is -1.
//
// How the order is stored: as distance groups, not as a permutation per P. The Ps at one
// key (tier, latency, other package) from P i form a group; P i visits its groups nearest
// first and each group's ascending P ids from the first id above i, wrapping around (that
// is the rotation), skipping i itself. The key depends only on the two Ps' places, and P i
// sits on place i mod n (n = places in use), so the groups are computed once per place
// (n^2 keys over places, not procs^2 over Ps) and a group's P ids follow from its places:
// place c holds Ps c, c+n, c+2n, ... A group is stored once however many places see it
// (a place's same-PU group is its SMT sibling's same-core group; the other package is one
// group for every place of this one). Memory is the distinct groups' P ids: 2 x 64 cores
// x SMT at 4096 Ps (pack:2 numa:1 core:64 pu:2) 266240 ints, 1 MiB, where the full lists
// were procs^2 ints, 64 MiB per copy; pack:2 numa:4 l3:2 core:8 pu:2: 53248. Worst case, a
// flat topology with no shared level, every place's "the rest" differs: places x procs.
// A P's list of VictimGroup points into the plan and is what the scheduler's steal loop walks.
//
// On the 2-socket x 64-core server this is built for (e.g. 2 x EPYC, SMT on: 256 PUs,
// NPS1..NPS4 gives 2..8 NUMA nodes, one L3 per 8-core CCX): a thief tries its SMT sibling,
// then its CCX (shared L3: the stolen task's data is likely in the same cache), then its
// NUMA node, then the other nodes of its socket (SLIT 11-12), then the other socket (SLIT
// 32: Infinity Fabric, ~2x latency, remote memory for the rest of the task's life). The
// rotation matters there: 15 idle CCX-mates must not all hammer one victim's cache line.
// With CORUN_PROCS=64 the 64 Ps take distinct cores of package 0 and its DRAM.
//
// Rejected: random victims (Go, Tokio) - cheap but crosses sockets as often as not on two
// sockets; a full latency-sorted order without tiers - SLIT says nothing about caches;
// reading the process-wide binding (HWLOC_CPUBIND_PROCESS walks /proc/self/task and ORs
// masks, including threads a previous run() pinned) - the caller's own mask is what the
// user set with taskset/cgroups; a full permutation per P (procs^2 ints: 64 MiB and
// seconds of sorting at 4096 Ps, for lists that repeat per place); random order within a
// group (the rotation spreads thieves as well, and is deterministic for tests and traces).
// Cost: the real machine's hwloc topology is loaded once per process and cached (plugin
// loading and sysfs discovery: ~20 ms on a small machine, more on big ones); each call
// then reads the affinity mask and computes places^2 keys.
#pragma once

#include <string>
#include <vector>

namespace corun::os {

// Where one P runs. Logical indices (hwloc logical_index, dense and in topology order), -1
// when the level is unknown; os_cpu is the PU's OS index (what sched_setaffinity takes).
struct ProcPlace {
  int os_cpu = -1;
  int pu = -1;
  int core = -1;
  int l2 = -1;
  int l3 = -1;
  int numa_node = -1;  // -1 with numa=false
  int package = -1;
  int numa_os_node = -1;  // OS index of numa_node (what libnuma/mbind/node_alloc take); -1 too
};

struct TopologyRequest {
  int procs = 0;          // 0: one P per usable PU; 1..4096; more than PUs: P i -> PU (i mod n)
  std::string synthetic;  // non-empty: hwloc_topology_set_synthetic (tests); not pinnable
  std::string xml_path;   // non-empty: hwloc_topology_set_xml; not pinnable
  bool numa = true;       // false (CORUN_NUMA=off): no NUMA tier/distances, numa_node -1
};

// One distance group of a P's steal order: the P ids at one key from it. The thief visits
// ids[start], ids[start+1], ..., ids[n-1], ids[0], ..., ids[start-1], skipping its own id
// (present only in the same-PU group under oversubscription). ids points into the
// TopologyPlan it came from: valid while that plan object lives, unmoved-from and unchanged
// (moving a plan keeps its groups' buffers, so a plan moved into place stays good).
struct VictimGroup {
  const int* ids = nullptr;  // ascending P ids
  int n = 0;
  int start = 0;  // index of the first id above the thief's (0 when none is)
};

struct TopologyPlan {
  std::vector<ProcPlace> procs;  // one per P
  // The steal order (see the header comment): groups[g] the ascending P ids of distinct
  // group g; place_groups[c] the groups of place c (P c, c+places, ...) nearest first.
  std::vector<std::vector<int>> groups;
  std::vector<std::vector<int>> place_groups;
  int numa_nodes = 1;                // distinct NUMA nodes the Ps run on (1 if numa off)
  int pus = 0;                       // usable PUs (affinity mask, or all when not real)
  bool pinnable = false;             // PUs are this machine's: pin_current_thread works
  bool numa_distances_used = false;  // a latency matrix ordered cross-node victims

  // P p's groups, nearest first, without groups holding only p (pointing into *this).
  std::vector<VictimGroup> victim_groups(int p) const;
  // P p's victims in visiting order: every other P exactly once (tests, describe()).
  std::vector<int> victims(int p) const;
  std::string describe() const;  // multi-line summary (CORUN_DEBUG, tests)
};

// Builds the plan. Throws std::runtime_error naming what failed (bad procs, bad synthetic
// string, unreadable XML, empty affinity mask). Thread-safe.
TopologyPlan plan_topology(const TopologyRequest& req);

// Number of CPUs in the calling thread's affinity mask (sched_getaffinity; no hwloc). >= 1.
int hardware_threads_in_affinity_mask() noexcept;

// Binds the calling thread to the single CPU os_cpu. Returns 0 or an errno value
// (EINVAL: os_cpu < 0, or not allowed by the cgroup cpuset).
int pin_current_thread(int os_cpu) noexcept;

}  // namespace corun::os
