// os/stack.cpp — slab-carved task stacks, guard budget, canaries, overflow reporting.
// The design (why slabs, why a budget, what was rejected) is in stack.hpp.
//
// Implementation notes:
//  - Syscalls on the allocate path (mmap, mbind, madvise(NOHUGEPAGE), mprotect) run under
//    mu_: this is the slow path behind the scheduler's per-P cache, and doing them under the
//    lock keeps "the newest slab" and the budget trivially consistent. trim()'s
//    madvise(DONTNEED) runs outside mu_ (it is the one that happens in bulk), on a private
//    copy of the surplus, so other threads keep allocating and releasing meanwhile.
//  - release() is noexcept and must not allocate: carve_locked() grows hot_/cold_ capacity
//    ahead so that a push_back never reallocates (both capacities >= carved_).
//  - The signal handler reads only tls_running_stack (initial-exec TLS, constinit), the
//    interrupted context's stack pointer, the slab table (atomics in static storage), g_page
//    and g_prev_segv/g_prev_bus, and calls only async-signal-safe functions (sigaction,
//    raise, write, abort).
//  - The slab table: each entry is one atomic word, (base >> 12) << 28 | (len >> 12), 0 when
//    free, so the handler never reads a torn range. Writers claim a free entry with a CAS
//    (several allocators map slabs concurrently, each under its own lock) and clear it
//    before munmap. g_slab_used is a high-water mark of the entries ever used: the handler
//    scans only those.
//  - The canary pattern is a function-local static (initialised on first use, thread-safe),
//    not a namespace-scope one: no static-initialisation-order dependence.
#include "os/stack.hpp"

#include <fcntl.h>
#include <numaif.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace corun::os {

thread_local constinit RunningStack tls_running_stack __attribute__((tls_model("initial-exec")));

namespace {

constexpr std::size_t kMaxStackBytes = std::size_t{1} << 30;
constexpr std::size_t kAltStackBytes = 64 * 1024;
constexpr long kDefaultMaxMapCount = 65530;

std::size_t page_size() {
  static const std::size_t p = [] {
    long v = sysconf(_SC_PAGESIZE);
    return v > 0 ? static_cast<std::size_t>(v) : std::size_t{4096};
  }();
  return p;
}

// Reads a whole small /proc or /sys file with open/read (no stdio buffering surprises).
// Calls fn(chunk, n) per read. Returns false if it cannot be opened.
template <class Fn>
bool read_file(const char* path, Fn&& fn) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    fn(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return true;
}

long map_count() {
  long lines = 0;
  read_file("/proc/self/maps", [&](const char* b, std::size_t n) {
    lines += static_cast<long>(std::count(b, b + n, '\n'));
  });
  return lines;
}

void write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

long max_map_count() {
  std::string s;
  if (!read_file("/proc/sys/vm/max_map_count",
                 [&](const char* b, std::size_t n) { s.append(b, n); }))
    return kDefaultMaxMapCount;
  long v = std::strtol(s.c_str(), nullptr, 10);
  return v > 0 ? v : kDefaultMaxMapCount;
}

// The process-wide auto-mode guard budget, in map entries. Computed once (call_once gives
// the happens-before for the initial store); afterwards only fetch_sub/fetch_add'ed.
// All operations are relaxed: it is a counter that publishes no other data.
std::once_flag g_auto_once;
std::atomic<long> g_auto_left{0};
// Guards currently paid from the auto budget, and vm.max_map_count as read at init: for the
// warning only. Relaxed: counters, no data published with them.
std::atomic<long> g_auto_guards{0};
std::atomic<long> g_max_map_count{kDefaultMaxMapCount};
// Set (relaxed exchange) by the allocate() that prints the unguarded-stack warning.
std::atomic<bool> g_warned{false};

void init_auto_budget() {
  long limit = max_map_count();
  g_max_map_count.store(limit, std::memory_order_relaxed);
  long b = limit / 2 - map_count();
  g_auto_left.store(b > 0 ? b : 0, std::memory_order_relaxed);
}

void warn_unguarded() {
  char msg[400];
  int n = std::snprintf(msg, sizeof msg,
                        "corun: %ld task stacks guarded (vm.max_map_count=%ld); task stacks beyond "
                        "that have no guard page: an overflow there is caught later, by a canary "
                        "check when the task parks or exits; raise vm.max_map_count (e.g. sysctl "
                        "-w vm.max_map_count=262144) to guard more\n",
                        g_auto_guards.load(std::memory_order_relaxed),
                        g_max_map_count.load(std::memory_order_relaxed));
  if (n > 0) write_all(2, msg, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof msg - 1));
}

// ---- the slab table (see the implementation notes) ----
constexpr std::size_t kSlabTableSize = 16384;
constexpr unsigned kLenBits = 28;  // slab length in 4 KiB units: < 1 TiB
constinit std::atomic<std::uint64_t> g_slab_table[kSlabTableSize] = {};
constinit std::atomic<std::size_t> g_slab_used{0};

// 0 if the range does not fit the packing (then it is simply not in the table).
std::uint64_t pack_slab(const void* base, std::size_t len) {
  auto b = reinterpret_cast<std::uintptr_t>(base);
  if ((b & 4095) != 0 || (len & 4095) != 0 || len == 0) return 0;
  std::uint64_t bp = b >> 12, lp = len >> 12;
  if (lp >= (std::uint64_t{1} << kLenBits) || bp >= (std::uint64_t{1} << (64 - kLenBits))) return 0;
  return bp << kLenBits | lp;
}

void register_slab(const void* base, std::size_t len) {
  std::uint64_t v = pack_slab(base, len);
  if (v == 0) return;
  for (std::size_t i = 0; i < kSlabTableSize; ++i) {
    std::uint64_t expected = 0;
    // release: pairs with the handler's acquire load (a complete entry or 0, never torn).
    if (g_slab_table[i].compare_exchange_strong(expected, v, std::memory_order_release,
                                                std::memory_order_relaxed)) {
      std::size_t used = g_slab_used.load(std::memory_order_relaxed);
      // release: a reader that sees the new mark also sees the entry below it.
      while (used < i + 1 &&
             !g_slab_used.compare_exchange_weak(used, i + 1, std::memory_order_release,
                                                std::memory_order_relaxed)) {
      }
      return;
    }
  }
  // Full: the slab is not in the table (documented in stack.hpp).
}

void unregister_slab(const void* base, std::size_t len) {
  std::uint64_t v = pack_slab(base, len);
  if (v == 0) return;
  std::size_t used = g_slab_used.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used; ++i) {
    std::uint64_t expected = v;
    // relaxed: the entry goes back to free; nothing is published with it.
    if (g_slab_table[i].compare_exchange_strong(expected, 0, std::memory_order_relaxed)) return;
  }
}

// Online NUMA nodes as text ("0", "0-3,5"); "0" when the kernel has no NUMA support.
std::string online_nodes() {
  std::string s;
  if (!read_file("/sys/devices/system/node/online",
                 [&](const char* b, std::size_t n) { s.append(b, n); }))
    return "0";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "0" : s;
}

bool node_in_list(const std::string& list, int node) {
  // Format: comma-separated items, each "N" or "A-B".
  std::size_t i = 0;
  while (i < list.size()) {
    std::size_t end = list.find(',', i);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(i, end - i);
    long a = 0, b = 0;
    std::size_t dash = item.find('-');
    a = std::strtol(item.c_str(), nullptr, 10);
    b = dash == std::string::npos ? a : std::strtol(item.c_str() + dash + 1, nullptr, 10);
    if (node >= a && node <= b) return true;
    i = end + 1;
  }
  return false;
}

std::size_t checked_stack_bytes(std::size_t want) {
  if (want == 0 || want > kMaxStackBytes)
    throw std::invalid_argument("corun: StackOptions.stack_bytes = " + std::to_string(want) +
                                ": expected 1 to " + std::to_string(kMaxStackBytes) +
                                " bytes (rounded up to whole pages)");
  std::size_t p = page_size();
  return (want + p - 1) / p * p;
}

long checked_budget(long b) {
  if (b < -1)
    throw std::invalid_argument("corun: StackOptions.guard_map_budget = " + std::to_string(b) +
                                ": expected -1 (auto) or a count of map entries >= 0");
  return b;
}

int checked_node(int node) {
  if (node < -1)
    throw std::invalid_argument("corun: StackOptions.numa_node = " + std::to_string(node) +
                                ": expected -1 (no placement) or an online NUMA node (" +
                                online_nodes() + ")");
  if (node >= 0) {
    std::string online = online_nodes();
    if (!node_in_list(online, node))
      throw std::invalid_argument("corun: StackOptions.numa_node = " + std::to_string(node) +
                                  " is not an online NUMA node of this machine; online nodes: " +
                                  online + " (or -1 for no placement)");
  }
  return node;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// StackAllocator

StackAllocator::StackAllocator(const StackOptions& o)
    : page_(page_size()),
      stack_bytes_(checked_stack_bytes(o.stack_bytes)),
      slot_bytes_(page_ + stack_bytes_),
      stacks_per_slab_(std::max<std::size_t>(1, o.slab_bytes / slot_bytes_)),
      keep_hot_(o.keep_hot),
      numa_node_(checked_node(o.numa_node)),
      auto_budget_(checked_budget(o.guard_map_budget) == -1) {
  if (auto_budget_)
    std::call_once(g_auto_once, init_auto_budget);
  else
    own_budget_left_ = o.guard_map_budget;
}

StackAllocator::~StackAllocator() {
  // No lock: destruction requires that no other thread uses the allocator.
  for (const Slab& s : slabs_) {
    unregister_slab(s.base, s.len);  // out of the handler's table before the range goes
    ::munmap(s.base, s.len);
  }
  // Give our guards' map entries back to the shared auto budget (relaxed: counters).
  if (auto_budget_ && budget_guards_ > 0) {
    g_auto_left.fetch_add(2 * static_cast<long>(budget_guards_), std::memory_order_relaxed);
    g_auto_guards.fetch_sub(static_cast<long>(budget_guards_), std::memory_order_relaxed);
  }
}

std::size_t StackAllocator::slabs() const {
  base::Guard g(mu_);
  return slabs_.size();
}
std::size_t StackAllocator::stacks_carved() const {
  base::Guard g(mu_);
  return carved_;
}
std::size_t StackAllocator::guarded() const {
  base::Guard g(mu_);
  return guarded_;
}
std::size_t StackAllocator::cold() const {
  base::Guard g(mu_);
  return cold_.size();
}
std::size_t StackAllocator::hot() const {
  base::Guard g(mu_);
  return hot_.size();
}

Stack StackAllocator::allocate() {
  Stack s;
  bool warn = false;
  {
    base::Guard g(mu_);
    if (!hot_.empty()) {
      s = hot_.back();
      hot_.pop_back();
      if (hot_.size() < hot_low_) hot_low_ = hot_.size();
    } else if (!cold_.empty()) {
      hot_low_ = 0;
      s = cold_.back();
      cold_.pop_back();
    } else {
      hot_low_ = 0;
      s = carve_locked();
      // relaxed: a once-flag for a message; it orders nothing else.
      warn = !s.guarded && auto_budget_ && !g_warned.exchange(true, std::memory_order_relaxed);
    }
  }
  // A hot stack's is intact (the scheduler checked it when its task exited), a fresh one's
  // reads as zeros, and a cold one's may have been wiped with the slot below by trim() while
  // this one was free: writing it always keeps this simple. It lies in the top page of the
  // slot below, resident while that slot's task lives (a mass spawn carves in address
  // order, so the slot below is usually live): no page fault then.
  write_canary(s);
  if (warn) warn_unguarded();
  return s;
}

std::size_t StackAllocator::allocate_some(Stack* out, std::size_t n) {
  std::size_t k = 0;
  {
    base::Guard g(mu_);
    while (k < n && !hot_.empty()) {
      out[k++] = hot_.back();
      hot_.pop_back();
    }
    if (hot_.size() < hot_low_) hot_low_ = hot_.size();
  }
  if (k == 0) {
    out[0] = allocate();
    return 1;
  }
  for (std::size_t i = 0; i < k; ++i) write_canary(out[i]);  // as allocate() says why
  return k;
}

bool StackAllocator::release_some(const Stack* s, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) check_released(s[i]);
  base::Guard g(mu_);
  for (std::size_t i = 0; i < n; ++i) hot_.push_back(s[i]);  // capacity reserved: no alloc
  return hot_.size() > keep_hot_;
}

void StackAllocator::check_released(const Stack& s) const noexcept {
  if (s.lo == nullptr || s.hi < s.lo ||
      static_cast<std::size_t>(s.hi - s.lo) != stack_bytes_ - kCanaryBytes) {
    char msg[160];
    int n = std::snprintf(msg, sizeof msg,
                          "corun: StackAllocator::release: not a %zu-byte stack of this "
                          "allocator (lo=%p hi=%p)\n",
                          stack_bytes_ - kCanaryBytes, static_cast<void*>(s.lo),
                          static_cast<void*>(s.hi));
    if (n > 0)
      (void)!::write(2, msg, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof msg - 1));
    std::abort();
  }
}

bool StackAllocator::release(const Stack& s) noexcept {
  check_released(s);
  base::Guard g(mu_);
  hot_.push_back(s);  // capacity reserved in carve_locked(): no allocation
  return hot_.size() > keep_hot_;
}

bool StackAllocator::has_surplus() const {
  base::Guard g(mu_);
  return hot_.size() > keep_hot_;
}

std::size_t StackAllocator::trim() noexcept {
  std::vector<Stack> batch;
  {
    base::Guard g(mu_);
    std::size_t surplus = hot_.size() > keep_hot_ ? hot_.size() - keep_hot_ : 0;
    std::size_t n = std::min(surplus, hot_low_);
    if (n > 0) {
      try {
        batch.assign(hot_.begin(), hot_.begin() + static_cast<std::ptrdiff_t>(n));
      } catch (...) {
        return 0;  // no memory for the list: keep the stacks, try next time
      }
      hot_.erase(hot_.begin(), hot_.begin() + static_cast<std::ptrdiff_t>(n));  // oldest
    }
    hot_low_ = hot_.size();
  }
  if (!batch.empty()) make_cold(batch.data(), batch.size());
  return batch.size();
}

void StackAllocator::make_cold(Stack* b, std::size_t n) noexcept {
  std::sort(b, b + n, [](const Stack& x, const Stack& y) { return x.lo < y.lo; });
  for (std::size_t i = 0; i < n;) {
    // A run: slots whose stacks are separated only by an unguarded (RW, never touched) guard
    // slot page. A PROT_NONE guard ends the run (keeps madvise off PROT_NONE pages).
    std::size_t j = i + 1;
    while (j < n && b[j].lo == b[j - 1].hi + kCanaryBytes + page_ && !b[j].guarded) ++j;
    std::byte* start = b[i].lo;
    std::byte* end = b[j - 1].hi + kCanaryBytes;  // the slot's end: page-aligned
    if (keeps_top_page(b[j - 1])) end -= page_;
    // Failure only leaves the pages resident; the range and its guards stay either way.
    if (end > start) ::madvise(start, static_cast<std::size_t>(end - start), MADV_DONTNEED);
    i = j;
  }
  base::Guard g(mu_);
  for (std::size_t i = 0; i < n; ++i) cold_.push_back(b[i]);  // capacity reserved: no alloc
}

bool StackAllocator::keeps_top_page(const Stack& s) noexcept {
  // s's top kCanaryBytes hold the canary of the slot above it in the slab, which may be
  // handed out now, or by an allocate() racing with the caller's madvise. Decided under mu_,
  // where carving happens: a slot carved after this is not known guarded, so it is kept
  // for. The page can go only when there is no slot above (slab top) or it is carved and
  // guarded (a guard is fixed for the slot's life: it never has a canary).
  const std::size_t above = std::size_t{s.slot} + 1;
  if (above % stacks_per_slab_ == 0) return false;  // slots are carved slab after slab
  base::Guard g(mu_);
  return !(above < slot_guarded_.size() && slot_guarded_[above]);
}

bool StackAllocator::take_guard_locked() {
  if (guards_stopped_) return false;
  if (!auto_budget_) {
    if (own_budget_left_ < 2) return false;
    own_budget_left_ -= 2;
    return true;
  }
  // Relaxed CAS: only the counter's own value matters; no data is published with it.
  long left = g_auto_left.load(std::memory_order_relaxed);
  while (left >= 2) {
    if (g_auto_left.compare_exchange_weak(left, left - 2, std::memory_order_relaxed)) return true;
  }
  return false;
}

Stack StackAllocator::carve_locked() {
  // Keep release() allocation-free (see the file comment). Grows geometrically.
  std::size_t need = carved_ + 1;
  if (cold_.capacity() < need) cold_.reserve(std::max<std::size_t>(64, 2 * cold_.capacity()));
  if (hot_.capacity() < need) hot_.reserve(std::max<std::size_t>(64, 2 * hot_.capacity()));
  if (carved_ >= UINT32_MAX)  // Stack::slot is 32 bits (that is 32 TiB of 4 KiB stacks)
    throw StackAllocError("corun: 2^32 task stacks carved by one allocator: no more");
  if (slot_guarded_.capacity() < need)  // throws before anything changed
    slot_guarded_.reserve(std::max<std::size_t>(64, 2 * slot_guarded_.capacity()));

  if (carve_next_ == carve_end_) map_slab_locked();
  std::byte* slot = carve_next_;
  carve_next_ += slot_bytes_;

  const bool slab_guard = slot == slabs_.back().base;  // the slab's bottom page
  Stack s;
  s.lo = slot + page_;
  s.hi = slot + slot_bytes_ - kCanaryBytes;  // 64-aligned: slot_bytes_ is whole pages
  s.slot = static_cast<std::uint32_t>(carved_);
  s.guarded = guard_slot_locked(slot, slab_guard);
  // Unguarded: the canary goes in the top of the slot below (resident while it is in use),
  // right under this slot's RW guard page. A slab's bottom slot whose slab guard could not
  // be set has no slot below: its canary is its own bottom (one more page; rare).
  if (!s.guarded) s.canary = slab_guard ? s.lo : slot - kCanaryBytes;
  slot_guarded_.push_back(s.guarded);
  ++carved_;
  return s;
}

bool StackAllocator::guard_slot_locked(std::byte* slot, bool slab_guard) {
  const bool budgeted = take_guard_locked();
  if (!budgeted && !slab_guard) return false;
  if (::mprotect(slot, page_, PROT_NONE) == 0) {
    ++guarded_;
    if (budgeted) {
      ++budget_guards_;
      if (auto_budget_) g_auto_guards.fetch_add(1, std::memory_order_relaxed);  // a counter
    }
    return true;
  }
  // ENOMEM: the process hit vm.max_map_count (someone else mapped a lot). Give the
  // reservation back and stop guarding; canaries still protect every unguarded stack.
  if (budgeted) {
    guards_stopped_ = true;
    if (auto_budget_)
      g_auto_left.fetch_add(2, std::memory_order_relaxed);  // relaxed: a counter
    else
      own_budget_left_ += 2;
  }
  return false;
}

std::string StackAllocator::describe_locked(std::size_t want) const {
  std::size_t mapped = 0;
  for (const Slab& s : slabs_) mapped += s.len;
  return "corun: cannot map a " + std::to_string(want) + "-byte slab for " +
         std::to_string(stack_bytes_ / 1024) + " KiB task stacks (" + std::to_string(carved_) +
         " stacks carved, " + std::to_string(mapped) + " bytes mapped in " +
         std::to_string(slabs_.size()) + " slabs; /proc/self/maps has " +
         std::to_string(map_count()) + " entries, vm.max_map_count is " +
         std::to_string(max_map_count()) + "; lower CORUN_STACK_KB or the number of live tasks)";
}

void StackAllocator::map_slab_locked() {
  const std::size_t len = stacks_per_slab_ * slot_bytes_;
  slabs_.reserve(slabs_.size() + 1);  // before mmap: push_back below cannot throw
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    std::string msg = describe_locked(len) + ": " + std::strerror(e);
    if (e == ENOMEM) throw StackAllocError(msg);
    throw std::system_error(e, std::generic_category(), msg);
  }
  // A THP would back ~30 stacks with one 2 MiB page on the first touch. Errors (kernel
  // without THP) are harmless.
  ::madvise(p, len, MADV_NOHUGEPAGE);
  if (numa_node_ >= 0) {
    constexpr std::size_t kBits = 8 * sizeof(unsigned long);
    std::vector<unsigned long> mask(static_cast<std::size_t>(numa_node_) / kBits + 1, 0);
    mask[static_cast<std::size_t>(numa_node_) / kBits] |= 1ul << (numa_node_ % kBits);
    // maxnode is one more than the bits passed: the kernel reads maxnode-1 bits.
    if (::mbind(p, len, MPOL_PREFERRED, mask.data(), mask.size() * kBits + 1, 0) != 0) {
      int e = errno;
      if (e == EINVAL) {
        // The node was online at construction; it is not usable now (offlined, or not in
        // this process's cpuset). Other errors (ENOSYS, EPERM) only lose placement.
        ::munmap(p, len);
        throw std::system_error(e, std::generic_category(),
                                "corun: cannot place task stacks on NUMA node " +
                                    std::to_string(numa_node_) +
                                    " (mbind MPOL_PREFERRED); nodes online: " + online_nodes() +
                                    "; is the node in this process's cpuset?");
      }
    }
  }
  slabs_.push_back(Slab{static_cast<std::byte*>(p), len});
  register_slab(p, len);
  carve_next_ = static_cast<std::byte*>(p);
  carve_end_ = carve_next_ + len;
}

// ---------------------------------------------------------------------------------------
// Canaries

namespace {

std::uint64_t mix64(std::uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t make_canary_pattern() noexcept {
  std::uint64_t r = 0;
  if (::getrandom(&r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) r = 0;
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  std::uint64_t t = static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull +
                    static_cast<std::uint64_t>(ts.tv_nsec);
  std::uint64_t v = r ^ mix64(t ^ (static_cast<std::uint64_t>(::getpid()) << 40));
  for (unsigned i = 0; i < 8; ++i)  // no zero byte: a zero fill can never match a byte
    if (((v >> (8 * i)) & 0xff) == 0) v |= std::uint64_t{0xa5u ^ i} << (8 * i);
  return v;
}

constexpr std::size_t kCanaryWords = kCanaryBytes / sizeof(std::uint64_t);

}  // namespace

std::uint64_t canary_pattern() noexcept {
  static const std::uint64_t pattern = make_canary_pattern();
  return pattern;
}

void write_canary(const Stack& s) noexcept {
  if (s.canary == nullptr) return;
  const std::uint64_t c = canary_pattern();
  std::uint64_t w[kCanaryWords];
  for (auto& x : w) x = c;
  std::memcpy(s.canary, w, sizeof w);
}

bool canary_intact(const Stack& s) noexcept {
  if (s.canary == nullptr) return true;
  const std::uint64_t c = canary_pattern();
  std::uint64_t have[kCanaryWords];
  std::memcpy(have, s.canary, sizeof have);
  std::uint64_t diff = 0;
  for (std::uint64_t x : have) diff |= x ^ c;
  return diff == 0;
}

void set_auto_guard_budget_for_testing(long map_entries) {
  if (map_entries < 0)
    throw std::invalid_argument("corun: set_auto_guard_budget_for_testing(" +
                                std::to_string(map_entries) +
                                "): expected a count of map entries >= 0");
  std::call_once(g_auto_once, init_auto_budget);
  g_auto_left.store(map_entries, std::memory_order_relaxed);  // relaxed: a counter
}

bool in_stack_slabs(const void* p, std::size_t below) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  // acquire: pairs with register_slab's release stores (the mark, then each entry).
  const std::size_t used = g_slab_used.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used; ++i) {
    std::uint64_t v = g_slab_table[i].load(std::memory_order_acquire);
    if (v == 0) continue;
    std::uintptr_t base = static_cast<std::uintptr_t>(v >> kLenBits) << 12;
    std::uintptr_t len = static_cast<std::uintptr_t>(v & ((std::uint64_t{1} << kLenBits) - 1))
                         << 12;
    std::uintptr_t from = base > below ? base - below : 0;
    if (a >= from && a < base + len) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------
// Overflow reporting (async-signal-safe)

namespace {

struct SigBuf {
  char b[512];
  std::size_t n = 0;
  void put(const char* s) {
    while (*s != '\0' && n < sizeof b - 1) b[n++] = *s++;
  }
  void put_u64(std::uint64_t v) {
    char d[20];
    int k = 0;
    do {
      d[k++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (k > 0 && n < sizeof b - 1) b[n++] = d[--k];
  }
};

}  // namespace

void report_stack_overflow(std::uint64_t task_id, std::size_t stack_bytes,
                           const char* how) noexcept {
  SigBuf m;
  m.put("corun: task ");
  m.put_u64(task_id);
  m.put(" overflowed its stack (");
  m.put_u64(stack_bytes / 1024);
  m.put(" KiB; raise CORUN_STACK_KB) \xe2\x80\x94 ");  // em dash, UTF-8
  m.put(how != nullptr ? how : "?");
  m.b[m.n++] = '\n';  // put() leaves room for it
  write_all(2, m.b, m.n);
  std::abort();
}

// ---------------------------------------------------------------------------------------
// SIGSEGV/SIGBUS handler and alternate signal stacks

namespace {

#if !CORUN_OS_SANITIZER_OWNS_SEGV
// Written once, inside install's call_once before sigaction installs the handler (so the
// handler, which can only run after that sigaction, sees them); read by the handler.
struct sigaction g_prev_segv;
struct sigaction g_prev_bus;
std::uintptr_t g_page = 4096;
std::once_flag g_install_once;

// The interrupted stack pointer, or 0 where this file does not know the register.
std::uintptr_t interrupted_sp(void* uc) {
#if defined(__x86_64__)
  return static_cast<std::uintptr_t>(static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_RSP]);
#elif defined(__aarch64__)
  return static_cast<std::uintptr_t>(static_cast<ucontext_t*>(uc)->uc_mcontext.sp);
#else
  (void)uc;
  return 0;
#endif
}

void overflow_handler(int sig, siginfo_t* si, void* uc) {
  const RunningStack& rs = tls_running_stack;
  if (si != nullptr && si->si_code > 0 && rs.lo != nullptr) {
    auto addr = reinterpret_cast<std::uintptr_t>(si->si_addr);
    auto lo = reinterpret_cast<std::uintptr_t>(rs.lo);
    if (addr < lo && addr >= lo - g_page)
      report_stack_overflow(rs.task_id, rs.bytes, "guard page hit");
    // Below the stack, inside the slabs: only PROT_NONE pages fault there, i.e. a guard
    // further down reached through unguarded memory (or a frame that jumped the guard).
    if (addr < lo && in_stack_slabs(si->si_addr))
      report_stack_overflow(rs.task_id, rs.bytes, "fault in a guard page below the stack");
    // The task runs below its own stack, in or just under the slabs (a frame jumped past
    // the slab guard into unmapped memory): an overflow, wherever the fault is.
    std::uintptr_t sp = uc != nullptr ? interrupted_sp(uc) : 0;
    if (sp != 0 && sp < lo && in_stack_slabs(reinterpret_cast<const void*>(sp), rs.bytes + g_page))
      report_stack_overflow(rs.task_id, rs.bytes, "stack pointer below the stack at a fault");
  }
  // Not ours: put the previous disposition back and let the fault happen again under it.
  ::sigaction(sig, sig == SIGBUS ? &g_prev_bus : &g_prev_segv, nullptr);
  // A fault re-executes the faulting instruction; a sent signal (si_code <= 0: kill,
  // sigqueue, tgkill) would not come back by itself, so re-send it (pending until we return).
  if (si == nullptr || si->si_code <= 0) ::raise(sig);
}

thread_local std::byte* t_alt_base = nullptr;  // this thread's altstack mapping (or null)
thread_local std::size_t t_alt_len = 0;
#endif

}  // namespace

void install_overflow_handler() {
#if !CORUN_OS_SANITIZER_OWNS_SEGV
  std::call_once(g_install_once, [] {
    g_page = page_size();
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = overflow_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    // On failure undo SIGSEGV, so a retry (call_once re-runs after a throw) never saves our
    // own handler as "previous".
    if (::sigaction(SIGSEGV, &sa, &g_prev_segv) != 0)
      throw std::system_error(errno, std::generic_category(),
                              "corun: cannot install the stack-overflow SIGSEGV handler");
    if (::sigaction(SIGBUS, &sa, &g_prev_bus) != 0) {
      int e = errno;
      ::sigaction(SIGSEGV, &g_prev_segv, nullptr);
      throw std::system_error(e, std::generic_category(),
                              "corun: cannot install the stack-overflow SIGBUS handler");
    }
  });
#endif
}

void thread_altstack_setup() {
#if !CORUN_OS_SANITIZER_OWNS_SEGV
  if (t_alt_base != nullptr) return;
  const std::size_t page = page_size();
  const std::size_t len = page + kAltStackBytes;
  void* p =
      ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (p == MAP_FAILED)
    throw std::system_error(errno, std::generic_category(),
                            "corun: cannot map a 64 KiB signal stack for this thread");
  auto* base = static_cast<std::byte*>(p);
  (void)::mprotect(base, page, PROT_NONE);  // best effort: a guard under the signal stack
  stack_t ss;
  std::memset(&ss, 0, sizeof ss);
  ss.ss_sp = base + page;
  ss.ss_size = kAltStackBytes;
  ss.ss_flags = 0;
  if (::sigaltstack(&ss, nullptr) != 0) {
    int e = errno;
    ::munmap(p, len);
    throw std::system_error(e, std::generic_category(),
                            "corun: sigaltstack of a 64 KiB signal stack failed");
  }
  t_alt_base = base;
  t_alt_len = len;
#endif
}

void thread_altstack_teardown() noexcept {
#if !CORUN_OS_SANITIZER_OWNS_SEGV
  if (t_alt_base == nullptr) return;
  stack_t cur;
  if (::sigaltstack(nullptr, &cur) == 0 && cur.ss_sp == t_alt_base + page_size()) {
    stack_t off;
    std::memset(&off, 0, sizeof off);
    off.ss_flags = SS_DISABLE;
    if (::sigaltstack(&off, nullptr) != 0) return;  // on it right now (EPERM): keep it mapped
  }
  ::munmap(t_alt_base, t_alt_len);
  t_alt_base = nullptr;
  t_alt_len = 0;
#endif
}

}  // namespace corun::os
