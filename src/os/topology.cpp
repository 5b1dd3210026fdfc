// os/topology: hwloc -> TopologyPlan. See topology.hpp for the placement and victim rules.
//
// Invariants: every hwloc object pointer lives only while its topology is loaded; the cached
// real-machine topology is loaded once and only read afterwards (hwloc documents concurrent
// read-only queries as safe), and the lock below still serialises planners so the cache
// pointer's set-up is simple. Synthetic/XML topologies are loaded per call and destroyed
// before returning (RAII), so errors never leak a topology.

#include "os/topology.hpp"

#include "base/lock.hpp"

#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <tuple>

namespace corun::os {
namespace {

// Largest explicit TopologyRequest::procs (README: CORUN_PROCS 1 to 4096); a machine with
// more PUs still gets one P per PU with procs = 0.
constexpr int kMaxProcs = 4096;

// Calling thread's affinity mask as OS CPU numbers, ascending. Grows the cpu_set_t until
// the kernel accepts its size (EINVAL: kernel mask wider than ours; machines with > 1024
// possible CPUs exist). Empty on failure.
std::vector<int> affinity_cpus() noexcept {
  for (int ncpus = 1024; ncpus <= (1 << 20); ncpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(ncpus);
    if (set == nullptr) return {};
    const size_t size = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      std::vector<int> cpus;
      try {
        for (int c = 0; c < ncpus; ++c)
          if (CPU_ISSET_S(c, size, set)) cpus.push_back(c);
      } catch (...) {
        cpus.clear();
      }
      CPU_FREE(set);
      return cpus;
    }
    const int err = errno;
    CPU_FREE(set);
    if (err != EINVAL) return {};
  }
  return {};
}

struct TopoDeleter {
  void operator()(hwloc_topology* t) const noexcept { hwloc_topology_destroy(t); }
};
using TopoPtr = std::unique_ptr<hwloc_topology, TopoDeleter>;

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const noexcept { hwloc_bitmap_free(b); }
};
using BitmapPtr = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("corun topology: " + what);
}

// Keeps only what the plan reads: L1 and instruction caches, I/O and Misc objects are
// dropped at discovery (fewer objects, faster load). Cores, L2, L3, NUMA nodes, packages
// and Groups keep hwloc's defaults.
void set_filters(hwloc_topology_t t) {
  hwloc_topology_set_icache_types_filter(t, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_type_filter(t, HWLOC_OBJ_L1CACHE, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_type_filter(t, HWLOC_OBJ_MISC, HWLOC_TYPE_FILTER_KEEP_NONE);
}

TopoPtr load_synthetic(const std::string& desc) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) fail("hwloc_topology_init failed");
  TopoPtr t(raw);
  set_filters(raw);
  if (hwloc_topology_set_synthetic(raw, desc.c_str()) != 0)
    fail("bad synthetic topology \"" + desc +
         "\": hwloc rejected it; accepted: levels like \"pack:2 numa:2 core:8 pu:2\" "
         "(see hwloc(7), SYNTHETIC TOPOLOGIES)");
  if (hwloc_topology_load(raw) != 0)
    fail("loading synthetic topology \"" + desc + "\" failed: " + std::strerror(errno));
  return t;
}

TopoPtr load_xml(const std::string& path) {
  // hwloc reports an unreadable file only as a failed load; check first for a clear message.
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fclose(f);
  } else {
    fail("cannot read topology XML \"" + path + "\": " + std::strerror(errno));
  }
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) fail("hwloc_topology_init failed");
  TopoPtr t(raw);
  set_filters(raw);
  if (hwloc_topology_set_xml(raw, path.c_str()) != 0)
    fail("hwloc rejected topology XML \"" + path + "\" (" + std::strerror(errno) +
         "): accepted: an hwloc XML export, e.g. from `lstopo --of xml`");
  if (hwloc_topology_load(raw) != 0)
    fail("loading topology XML \"" + path +
         "\" failed (not an hwloc 2.x XML export? make one with `lstopo --of xml`)");
  return t;
}

// The real machine, loaded once. Guarded by g_real_mu; never unloaded before exit.
base::Lock<base::LockRank::topology> g_real_mu;
TopoPtr g_real CORUN_GUARDED_BY(g_real_mu);

hwloc_topology_t real_topology_locked() CORUN_REQUIRES(g_real_mu) {
  if (!g_real) {
    hwloc_topology_t raw = nullptr;
    if (hwloc_topology_init(&raw) != 0) fail("hwloc_topology_init failed");
    TopoPtr t(raw);
    set_filters(raw);
    if (hwloc_topology_load(raw) != 0)
      fail(std::string("loading this machine's topology failed: ") + std::strerror(errno));
    g_real = std::move(t);
  }
  return g_real.get();
}

int logical_or(hwloc_obj_t o) {
  return o ? static_cast<int>(o->logical_index) : -1;
}

// The NUMA node whose memory is local to pu: the node with the smallest cpuset that still
// covers the PU (its "home" DRAM node; a node whose locality is the whole machine, e.g.
// CPU-less CXL or HBM covering many cores, loses to a tighter one). Ties: lower logical
// index (hwloc lists the DRAM node first). nullptr if the topology has no such node.
hwloc_obj_t home_node(hwloc_topology_t t, hwloc_obj_t pu) {
  hwloc_obj_t best = nullptr;
  int best_weight = 0;
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, nullptr); n;
       n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, n)) {
    if (!n->cpuset || !hwloc_bitmap_isincluded(pu->cpuset, n->cpuset)) continue;
    const int w = hwloc_bitmap_weight(n->cpuset);
    if (w <= 0) continue;
    if (!best || w < best_weight) {
      best = n;
      best_weight = w;
    }
  }
  return best;
}

// NUMA latency matrix indexed by node logical index; empty when absent.
struct Latency {
  int n = 0;
  std::vector<std::uint64_t> v;  // v[a*n+b]: latency from node a to node b; 0 = unknown
  std::uint64_t at(int a, int b) const {
    if (a < 0 || b < 0 || a >= n || b >= n) return 0;
    return v[static_cast<size_t>(a) * static_cast<size_t>(n) + static_cast<size_t>(b)];
  }
};

Latency numa_latency(hwloc_topology_t t) {
  Latency lat;
  unsigned nr = 1;
  hwloc_distances_s* d = nullptr;
  if (hwloc_distances_get_by_type(t, HWLOC_OBJ_NUMANODE, &nr, &d,
                                  HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) != 0 ||
      nr == 0 || d == nullptr)
    return lat;
  const int nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  if (nodes > 1 && d->nbobjs > 1) {
    lat.n = nodes;
    lat.v.assign(static_cast<size_t>(nodes) * static_cast<size_t>(nodes), 0);
    for (unsigned a = 0; a < d->nbobjs; ++a) {
      for (unsigned b = 0; b < d->nbobjs; ++b) {
        hwloc_obj_t oa = d->objs[a];
        hwloc_obj_t ob = d->objs[b];
        if (!oa || !ob || oa->type != HWLOC_OBJ_NUMANODE || ob->type != HWLOC_OBJ_NUMANODE)
          continue;
        if (static_cast<int>(oa->logical_index) >= nodes ||
            static_cast<int>(ob->logical_index) >= nodes)
          continue;
        lat.v[oa->logical_index * static_cast<size_t>(nodes) + ob->logical_index] =
            d->values[a * d->nbobjs + b];
      }
    }
  }
  hwloc_distances_release(t, d);
  return lat;
}

struct Pu {
  hwloc_obj_t obj;
  int core;
};

// Usable PUs in "one PU per core first" order (see topology.hpp).
std::vector<hwloc_obj_t> usable_pus(hwloc_topology_t t, hwloc_const_bitmap_t usable) {
  std::vector<Pu> pus;
  for (hwloc_obj_t pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, nullptr); pu;
       pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, pu)) {
    if (usable && !hwloc_bitmap_isset(usable, pu->os_index)) continue;
    pus.push_back({pu, logical_or(hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu))});
  }
  // rank = index of the PU among the usable PUs of its core (a PU without a core is alone).
  std::map<int, int> seen;
  std::vector<std::tuple<int, int, int>> keyed;  // (rank, pu logical index, position)
  keyed.reserve(pus.size());
  for (size_t i = 0; i < pus.size(); ++i) {
    const int rank = pus[i].core >= 0 ? seen[pus[i].core]++ : 0;
    keyed.emplace_back(rank, static_cast<int>(pus[i].obj->logical_index), static_cast<int>(i));
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<hwloc_obj_t> out;
  out.reserve(pus.size());
  for (const auto& k : keyed) out.push_back(pus[static_cast<size_t>(std::get<2>(k))].obj);
  return out;
}

TopologyPlan plan_from(hwloc_topology_t t, const TopologyRequest& req, bool real) {
  TopologyPlan plan;
  plan.pinnable = real && hwloc_topology_is_thissystem(t);

  BitmapPtr usable;
  if (real) {
    // The caller's mask, not HWLOC_CPUBIND_PROCESS (see topology.hpp), within what the
    // topology allows (cgroup cpuset; the kernel already keeps the mask inside it).
    usable.reset(hwloc_bitmap_alloc());
    if (!usable) throw std::bad_alloc();
    for (int c : affinity_cpus()) hwloc_bitmap_set(usable.get(), static_cast<unsigned>(c));
    hwloc_bitmap_and(usable.get(), usable.get(), hwloc_topology_get_allowed_cpuset(t));
  }
  const std::vector<hwloc_obj_t> pus = usable_pus(t, usable.get());
  if (pus.empty())
    fail(real ? "no usable CPU: the affinity mask (sched_getaffinity) and hwloc's allowed "
                "cpuset do not intersect"
              : "the topology has no PU");
  plan.pus = static_cast<int>(pus.size());
  const int nprocs = req.procs == 0 ? plan.pus : req.procs;

  // Places of the distinct PUs, then P i -> place (i mod n).
  std::vector<ProcPlace> places;
  places.reserve(pus.size());
  for (hwloc_obj_t pu : pus) {
    ProcPlace pl;
    pl.os_cpu = static_cast<int>(pu->os_index);
    pl.pu = static_cast<int>(pu->logical_index);
    pl.core = logical_or(hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu));
    pl.l2 = logical_or(hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_L2CACHE, pu));
    pl.l3 = logical_or(hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_L3CACHE, pu));
    pl.package = logical_or(hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, pu));
    if (req.numa) {
      if (hwloc_obj_t node = home_node(t, pu)) {
        pl.numa_node = static_cast<int>(node->logical_index);
        pl.numa_os_node = static_cast<int>(node->os_index);
      }
    }
    places.push_back(pl);
  }
  plan.procs.reserve(static_cast<size_t>(nprocs));
  for (int i = 0; i < nprocs; ++i)
    plan.procs.push_back(places[static_cast<size_t>(i) % places.size()]);

  std::set<int> nodes;
  for (const ProcPlace& p : plan.procs)
    if (p.numa_node >= 0) nodes.insert(p.numa_node);
  plan.numa_nodes = std::max<int>(1, static_cast<int>(nodes.size()));

  Latency lat;
  if (req.numa && nodes.size() > 1) {
    lat = numa_latency(t);
    plan.numa_distances_used = lat.n > 1;
  }

  // Group keys, see topology.hpp: (tier, latency, other package) packed into one integer,
  // most significant first. Bits: tier 63..60, latency 59..1 (SLIT values are < 256;
  // clamped), other package 0. The rotation is not in the key: it is how a group is walked.
  const auto group_key = [&](const ProcPlace& a, const ProcPlace& b) -> std::uint64_t {
    auto shared = [](int x, int y) { return x >= 0 && x == y; };
    std::uint64_t tier = 5;
    std::uint64_t latency = 0;
    if (a.pu == b.pu) {
      tier = 0;
    } else if (shared(a.core, b.core)) {
      tier = 1;
    } else if (shared(a.l2, b.l2)) {
      tier = 2;
    } else if (shared(a.l3, b.l3)) {
      tier = 3;
    } else if (shared(a.numa_node, b.numa_node)) {  // both -1 when numa is off
      tier = 4;
    } else if (plan.numa_distances_used) {
      latency = std::min<std::uint64_t>(lat.at(a.numa_node, b.numa_node), (1ull << 59) - 1);
    }
    // Every tier puts its own package first: one NUMA node may span both sockets (BIOS
    // node interleaving), and then the package is all that is left to go by.
    const std::uint64_t other_pkg = a.package >= 0 && b.package >= 0 && a.package != b.package;
    return tier << 60 | latency << 1 | other_pkg;
  };

  // Places in use: P i sits on place i mod n; with fewer Ps than PUs only the first nprocs.
  const int n = std::min<int>(nprocs, static_cast<int>(places.size()));
  plan.place_groups.resize(static_cast<size_t>(n));
  std::map<std::vector<int>, int> interned;  // a group's places -> its index in plan.groups
  std::vector<std::pair<std::uint64_t, std::vector<int>>> buckets;  // (key, places), this c
  for (int c = 0; c < n; ++c) {
    for (auto& bucket : buckets) bucket.second.clear();
    size_t last = 0;  // neighbours mostly share a key: try the previous bucket first
    for (int d = 0; d < n; ++d) {
      const std::uint64_t key =
          group_key(places[static_cast<size_t>(c)], places[static_cast<size_t>(d)]);
      if (last >= buckets.size() || buckets[last].first != key) {
        last = 0;
        while (last < buckets.size() && buckets[last].first != key) ++last;
        if (last == buckets.size()) buckets.emplace_back(key, std::vector<int>());
      }
      buckets[last].second.push_back(d);  // d ascending: each bucket stays sorted
    }
    std::sort(buckets.begin(), buckets.end());  // by key (places break no ties: keys differ)
    for (const auto& [key, members] : buckets) {
      if (members.empty()) continue;
      auto [it, fresh] = interned.try_emplace(members, static_cast<int>(plan.groups.size()));
      if (fresh) {
        // Place x holds Ps x, x+n, x+2n, ... < nprocs: row by row, each row ascending.
        std::vector<int> ids;
        ids.reserve(members.size() * static_cast<size_t>((nprocs + n - 1) / n));
        for (int row = 0; row < nprocs; row += n)
          for (int x : members) {
            if (row + x >= nprocs) break;
            ids.push_back(row + x);
          }
        plan.groups.push_back(std::move(ids));
      }
      plan.place_groups[static_cast<size_t>(c)].push_back(it->second);
    }
  }
  return plan;
}

// "3-7,0-2" style list of P indices in the given order (runs of +1 become ranges).
std::string ranges(const std::vector<int>& v, size_t max_chars) {
  std::string s;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(v[i]);
    if (j > i) s += '-' + std::to_string(v[j]);
    i = j + 1;
    if (s.size() > max_chars && i < v.size()) {
      s += ",... (" + std::to_string(v.size() - i) + " more)";
      break;
    }
  }
  return s;
}

std::string idx(int v) {
  return v >= 0 ? std::to_string(v) : std::string("-");
}

}  // namespace

std::vector<VictimGroup> TopologyPlan::victim_groups(int p) const {
  std::vector<VictimGroup> out;
  if (p < 0 || static_cast<size_t>(p) >= procs.size() || place_groups.empty()) return out;
  const auto& mine = place_groups[static_cast<size_t>(p) % place_groups.size()];
  out.reserve(mine.size());
  for (int g : mine) {
    const std::vector<int>& ids = groups[static_cast<size_t>(g)];
    if (ids.empty() || (ids.size() == 1 && ids[0] == p)) continue;
    VictimGroup vg;
    vg.ids = ids.data();
    vg.n = static_cast<int>(ids.size());
    vg.start = static_cast<int>(std::upper_bound(ids.begin(), ids.end(), p) - ids.begin());
    if (vg.start == vg.n) vg.start = 0;
    out.push_back(vg);
  }
  return out;
}

namespace {
// One group in P p's visiting order, without p.
std::vector<int> walk(const VictimGroup& g, int p) {
  std::vector<int> v;
  v.reserve(static_cast<size_t>(g.n));
  for (int k = 0, i = g.start; k < g.n; ++k, i = i + 1 == g.n ? 0 : i + 1)
    if (g.ids[i] != p) v.push_back(g.ids[i]);
  return v;
}
}  // namespace

std::vector<int> TopologyPlan::victims(int p) const {
  std::vector<int> out;
  for (const VictimGroup& g : victim_groups(p)) {
    const std::vector<int> w = walk(g, p);
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

std::string TopologyPlan::describe() const {
  std::string s = "topology: " + std::to_string(procs.size()) + " Ps on " + std::to_string(pus) +
                  " PUs, " + std::to_string(numa_nodes) + " NUMA node(s), " +
                  (numa_distances_used ? "victims by NUMA latency matrix"
                                       : "victims by cache/core/node/package") +
                  (pinnable ? ", pinnable" : ", not pinnable (synthetic/XML)") + "\n";
  for (size_t p = 0; p < procs.size(); ++p) {
    const ProcPlace& pl = procs[p];
    s += "  P" + std::to_string(p) + ": cpu " + idx(pl.os_cpu) + " pu " + idx(pl.pu) + " core " +
         idx(pl.core) + " l2 " + idx(pl.l2) + " l3 " + idx(pl.l3) + " node " + idx(pl.numa_node) +
         " pkg " + idx(pl.package);
    // Groups nearest first, " | " between them, each in this P's visiting order.
    std::string v;
    for (const VictimGroup& g : victim_groups(static_cast<int>(p))) {
      if (v.size() > 80) {
        v += " | ...";
        break;
      }
      v += (v.empty() ? "" : " | ") + ranges(walk(g, static_cast<int>(p)), 80 - v.size());
    }
    if (!v.empty()) s += " victims " + v;
    s += '\n';
  }
  return s;
}

TopologyPlan plan_topology(const TopologyRequest& req) {
  if (req.procs < 0 || req.procs > kMaxProcs)
    fail("procs = " + std::to_string(req.procs) + ": accepted 0 (one per PU) or 1.." +
         std::to_string(kMaxProcs));
  if (!req.synthetic.empty() && !req.xml_path.empty())
    fail("both synthetic (\"" + req.synthetic + "\") and xml_path (\"" + req.xml_path +
         "\") set: accepted at most one");
  if (!req.synthetic.empty()) {
    TopoPtr t = load_synthetic(req.synthetic);
    return plan_from(t.get(), req, false);
  }
  if (!req.xml_path.empty()) {
    TopoPtr t = load_xml(req.xml_path);
    return plan_from(t.get(), req, false);
  }
  base::Guard lock(g_real_mu);
  return plan_from(real_topology_locked(), req, true);
}

int hardware_threads_in_affinity_mask() noexcept {
  const size_t n = affinity_cpus().size();
  return n > 0 ? static_cast<int>(n) : 1;
}

int pin_current_thread(int os_cpu) noexcept {
  if (os_cpu < 0 || os_cpu >= (1 << 20)) return EINVAL;
  const int ncpus = os_cpu + 1;
  cpu_set_t* set = CPU_ALLOC(ncpus);
  if (set == nullptr) return ENOMEM;
  const size_t size = CPU_ALLOC_SIZE(ncpus);
  CPU_ZERO_S(size, set);
  CPU_SET_S(static_cast<size_t>(os_cpu), size, set);
  const int rc = sched_setaffinity(0, size, set);
  const int err = rc == 0 ? 0 : errno;
  CPU_FREE(set);
  return err;
}

}  // namespace corun::os
