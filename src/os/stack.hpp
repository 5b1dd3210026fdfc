// os/stack.hpp — task stacks: carved from large slabs, guard pages while the map budget
// allows (and always under each slab), a random canary under every unguarded stack (in the
// top of the slot below), and the overflow fault reporter.
//
// What it is: StackAllocator hands out fixed-size stacks [lo, hi). It maps memory in slabs
// (one mmap of ~16 MiB each, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE|MAP_STACK,
// MADV_NOHUGEPAGE) and carves them into slots of one guard page + the stack:
//
//     slab: | guard | stack 0   |c1| guard | stack 1   |c2| ... | guard | stack n-1 |  |
//                   ^lo         ^hi
//
// Every stack handed out ends kCanaryBytes (64) below its slot's end: hi = slot end - 64.
// Those top bytes of slot N-1 ("cN") hold the canary of slot N when N is unguarded, just
// under N's guard page: an overflow of N that gets through its guard page lands there.
//
// The guard page of a slot is made PROT_NONE (mprotect) while the guard budget allows;
// otherwise it stays an unused, never-touched RW page (costs address space, no memory).
// Slot 0's guard, the slab's bottom page, is PROT_NONE always (budget or not): the "slab
// guard". A runaway recursion on an unguarded stack writes down through its neighbours but
// cannot leave the slab: it faults there, inside the slabs, where the reporter names it.
//
// Why: one million parked tasks must fit under the default vm.max_map_count (65530). One
// mmap per stack is one map entry each; every PROT_NONE guard inside a slab splits it into
// up to 2 more entries. So guards are budgeted (half of vm.max_map_count, 2 entries each:
// about 16'350 guarded stacks at 65530, 65'500 at 262144) and, beyond the budget, stacks are
// protected by a canary: kCanaryBytes at [lo - page - 64, lo - page) (Stack::canary, the
// reserved top of the slot below) filled with a per-process random 64-bit pattern with no
// zero byte (canary_pattern()), which the scheduler checks with canary_intact() whenever
// such a task leaves its CPU (park, yield, exit: see sched/task.cpp). A guard catches an
// overflow at the faulting instruction; a canary later. The canary costs no memory: the
// top page of the slot below is resident while that slot's task lives (its record and
// first frames are there), and slots are carved bottom-up, so in a mass spawn the slot
// below is live; allocate() faults a page in only when the slot below is free and cold.
//
// What is and is not guaranteed (sanitizer builds aside, where ASan/TSan own SIGSEGV):
//  - Guarded stack: an overflow that touches its guard page faults and is reported with the
//    task's id at once ("guard page hit"). A single frame larger than a page can jump over
//    the guard (GCC's -fstack-clash-protection in the user's code prevents that by probing);
//    its writes then land in the neighbour below, and are reported only when one faults.
//  - Unguarded stack, the overflow runs into a PROT_NONE page further down (a guarded
//    neighbour's guard or the slab guard): the fault lies in the slabs below the running
//    stack and is reported with the task's id at once. A deep recursion always ends so (the
//    slab guard is at most one slab below), unless one frame jumps over the slab guard too:
//    then the fault is outside the slabs but the stack pointer is below the stack, within a
//    stack's size under a slab, and that is reported too. Neighbours written over meanwhile
//    are lost, but the process dies at that fault, before anything resumes them on this
//    thread (another thread could touch one in the microseconds before abort()).
//  - Unguarded stack, the overflow passes lo by more than the guard page, i.e. reaches the
//    slot below, writing over the canary there (any contiguous write, a zero fill included:
//    the pattern is random and never zero), and returns without a fault: reported with the
//    task's id when the task next parks, yields or exits. Until then the neighbour it
//    reached may run on another P with a damaged top: not guaranteed harmless.
//  - Unguarded stack, an overflow that stays within its own RW guard page (up to a page
//    below lo): harms nobody (that page belongs to no one) and is not reported.
//  - Not detected: an overflow that skips the canary's 64 bytes (frames with unwritten holes
//    just there) and returns before parking, and a wild pointer write into a neighbour's
//    top.
//
// Invariants:
//  - Every slot is page-aligned; stack_bytes() is a multiple of the page size; hi - lo ==
//    stack_bytes() - kCanaryBytes for every Stack handed out, hi + kCanaryBytes is the
//    slot's end (page-aligned), hi is 64-aligned. [hi, hi + kCanaryBytes) is never part of
//    what a stack's user may write (the scheduler's record sits below hi).
//  - Slots are carved in address order, slab after slab: Stack::slot + 1 is the slot right
//    above, unless the slot is its slab's last.
//  - A stack is in exactly one place: handed out, on the hot list, on the cold list, or not
//    yet carved. Hot stacks are as their last user left them; cold stacks were
//    madvise(MADV_DONTNEED)'d (memory returned, they read as zeros), except maybe their
//    top page (next item).
//  - trim() never madvises a page that may hold a live canary. Each madvise run (a run of
//    neighbouring cold slots) leaves out its topmost page, the top of its highest slot,
//    unless the slot above it in the slab is carved and guarded (a guard is fixed for the
//    slot's life) or there is none (slab top); the decision is made under mu_, where slots
//    are carved, so one carved concurrently with the madvise is kept for. Cost: one
//    resident page per such run (a mass exit: about one per slab; a guarded stack's run
//    under a guarded one keeps nothing). The slot above may be free now and handed out
//    later; allocate() rewrites its canary anyway. The destructor unmaps only when no
//    stack is in use; nothing else madvises, zeroes or unmaps stacks.
//  - release() only pushes on the hot list: no syscall on the task-exit path. Memory goes
//    back to the OS in trim(), which the runtime's monitor thread calls periodically: it
//    moves to the cold list the hot stacks that were surplus for a whole period (beyond
//    keep_hot, and never needed since the previous trim: the hot list's low-water mark),
//    oldest first, sorted by address, one madvise per run of neighbouring slots. A mass
//    exit of a million tasks then costs a few thousand madvise calls in the background,
//    not one TLB shootdown (an IPI to every CPU of the process) per task.
//  - allocate() (re)writes the canary of every unguarded stack it hands out, so
//    canary_intact() is true for every stack handed out. A guarded stack has no canary
//    (Stack::canary is nullptr: write_canary does nothing, canary_intact is true). A slab's
//    bottom slot is guarded by its slab guard; if that mprotect failed, it keeps its canary
//    at its own bottom [lo, lo + 64) (the old design: one more page, rare).
//  - A guard, once set, stays until the slab is unmapped (the destructor): guarded() only
//    grows, and Stack::guarded is fixed for the life of the slot.
//  - Guard budget accounting counts 2 map entries per guard (a PROT_NONE page in the middle
//    of a RW mapping splits it into 3). Auto mode (guard_map_budget = -1) shares ONE
//    process-wide budget, computed once when the first auto-mode allocator is built, among
//    all auto-mode allocators (per-node allocators must not each claim half the limit);
//    an allocator returns its share when destroyed. An explicit budget is per allocator.
//    A slab guard takes budget while there is some and is set anyway when there is none
//    (<= 2 entries per slab, ~1 per 240 stacks of 64 KiB: 1M stacks add ~8'300 entries).
//  - If mprotect fails anyway (ENOMEM: the map count hit the limit because something else
//    mapped a lot), that stack is unguarded and the allocator stops guarding.
//  - Every mapped slab is in a process-wide fixed table (lock-free, one packed atomic word
//    per slab) that the fault handler reads; a slab beyond its 16384 entries (256 GiB of
//    16 MiB slabs) is simply not in it: its faults fall back to the guard-page rule.
//  - An auto-mode allocator that carves the process's first unguarded stack prints one
//    warning on stderr (the guarded count, vm.max_map_count, the remedy); once per process.
//
// Rejected (measured figures: the commit that brought the random canary, and README):
//  - One mmap (+ guard) per stack (marl, Boost.Context's protected_fixedsize): 1-2 map
//    entries per stack, so it fails near 32k (guarded) or 65k stacks under the default.
//  - Raising vm.max_map_count: needs root, and a library must work on a default box (the
//    README tells operators what raising it buys; the warning says it too).
//  - A guard every N stacks beyond the budget (a "row" guard): the slab guard already bounds
//    where a recursion can go and makes it fault inside the slabs; extra guards cost 2 map
//    entries each and catch only the stacks right above them.
//  - Relying on -fstack-clash-protection: it probes pages inside large frames, which helps
//    only where a guard exists to be hit; on an unguarded stack the probes hit RW memory.
//    corun cannot impose it on users' code either.
//  - A zero canary (an earlier design; free: untouched pages read as zeros): a zero fill
//    (`std::array<char, N> buf{}`, memset 0) overwrote it with the same bytes, undetected.
//  - The random canary at the stack's own bottom, [lo, lo + 64) (the design before this
//    one): it catches an overflow a page earlier, but writing it at allocate faults in the
//    bottom page, one more resident page per live unguarded stack: perf ParkedTasks,
//    200'000 tasks of 64 KiB (184'000 unguarded), 4'098 -> 7'843 B/task and ~11 -> ~19
//    us/op to spawn one (noisy 2-vCPU VM). In the slot below it costs nothing, and catches
//    exactly the overflows that reach a neighbour (figures: the commit that moved it).
//  - trim() leaving out the top page of every run whose slot above exists (simpler: no
//    lookup of the slot above): guarded slots are runs of one (their PROT_NONE guards split
//    runs), so with fewer than ~16k tasks, the common case, a cold stack would keep its top
//    page, most of what a shallow task ever touched: trim would return little.
//  - Segmented / growable stacks (Go): needs compiler support for C++ frames.
//  - Populating fresh stacks' top pages ahead, in batches (MADV_POPULATE_WRITE): a fresh
//    page costs the same either way here (3-5 us: the kernel's allocation, zeroing and
//    memcg charge, not the fault's trap; perf/RESULTS.md, "a million parked tasks").
//  - Freeing released stacks back to the OS (munmap): carved slots are reused; memory of
//    stacks beyond keep_hot is returned with MADV_DONTNEED instead, which keeps the
//    address range and its guard (no map-entry churn, no new mprotect).
//  - One madvise per released stack: ~100 µs each on a small VM, and each call flushes
//    the TLB of every CPU running the process (IPIs on a many-core box).
//  - Transparent huge pages on slabs: touching one stack's top page would fault in a
//    2 MiB page spanning ~30 stacks; slabs are MADV_NOHUGEPAGE.
//
// Thread safety: StackAllocator is thread-safe: one lock (mu_, rank stacks) guards all of its
// mutable state; the scheduler keeps a per-P cache in front, so this is the slow path.
// write_canary/canary_intact touch only the given stack's canary bytes. install_overflow_handler is
// process-wide and idempotent; thread_altstack_* act on the calling thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "arch/sanitizer.hpp"
#include "base/lock.hpp"

// 1 when a sanitizer that owns SIGSEGV handling and the threads' alternate signal stacks
// (ASan, TSan) is on: install_overflow_handler and thread_altstack_* are then no-ops.
#define CORUN_OS_SANITIZER_OWNS_SEGV (CORUN_ASAN || CORUN_TSAN)

namespace corun::os {

// A task stack. Usable bytes are [lo, hi); the stack grows down from hi. If guarded,
// [lo - page, lo) is PROT_NONE. [hi, hi + kCanaryBytes) is reserved: it holds the canary of
// the slot above (if that one is unguarded); nothing of this stack's user may touch it.
struct Stack {
  std::byte* lo = nullptr;
  std::byte* hi = nullptr;
  // This stack's canary (kCanaryBytes): the top of the slot below, lo - page - kCanaryBytes;
  // nullptr for a guarded stack. (lo itself for an unguarded slab-bottom slot: its slab
  // guard's mprotect failed, there is no slot below.)
  std::byte* canary = nullptr;
  std::uint32_t slot = 0;  // carve index in its allocator (the allocator's bookkeeping)
  bool guarded = false;
};

struct StackOptions {
  // Usable size per stack; rounded up to whole pages. Accepted: 1 byte .. 1 GiB.
  std::size_t stack_bytes = 64 * 1024;
  // Target slab size; a slab holds max(1, slab_bytes / (stack + page)) stacks.
  std::size_t slab_bytes = 16u << 20;
  // -1: auto (process-wide budget = vm.max_map_count/2 - lines of /proc/self/maps at the
  // first auto allocator's construction, clamped >= 0, shared by all auto allocators).
  // >= 0: this allocator's own budget in map entries; each guard counts 2.
  // Accepted: -1 or >= 0.
  long guard_map_budget = -1;
  // >= 0: mbind(MPOL_PREFERRED) every slab to that node; must be an online node of this
  // machine (checked in the constructor). -1: no placement.
  int numa_node = -1;
  // Released stacks trim() always keeps hot (as they are); surplus beyond it goes cold.
  std::size_t keep_hot = 1024;
};

// Thrown by allocate() when mmap fails with ENOMEM. what() names the stack size, stacks
// carved, bytes mapped, the map count and vm.max_map_count. (Other mmap errors throw
// std::system_error with the same message.)
class StackAllocError : public std::bad_alloc {
 public:
  explicit StackAllocError(std::string msg) : msg_(std::move(msg)) {}
  const char* what() const noexcept override { return msg_.c_str(); }

 private:
  std::string msg_;
};

class StackAllocator {
 public:
  // Throws std::invalid_argument for a bad option (the message names the option, the value
  // and what is accepted). Maps nothing yet.
  explicit StackAllocator(const StackOptions& opts);
  // Unmaps every slab. All stacks must be unused by then (no task may run on one).
  ~StackAllocator();
  StackAllocator(const StackAllocator&) = delete;
  StackAllocator& operator=(const StackAllocator&) = delete;

  // Hot list (LIFO), then cold list (LIFO), then carve from the current slab, then map a
  // new slab. An unguarded stack gets its canary written, in the top page of the slot
  // below (resident already while that slot is in use).
  // Throws StackAllocError (a std::bad_alloc) or std::system_error if a slab cannot be
  // mapped. May print the one-per-process unguarded-stack warning (auto budget only).
  Stack allocate();
  // Gives a stack back (must come from this allocator's allocate() and not be in use).
  // Aborts with a message if s is not stack_bytes() long (cheap sanity check). Returns
  // true if the hot list now exceeds keep_hot (time to schedule a trim()).
  bool release(const Stack& s) noexcept;
  // The same for many at once, under one lock (a P's task cache, sched/task.cpp):
  // allocate_some hands out up to n (>= 1) stacks, all from the hot list if it has any
  // (else one, as allocate() finds it), and returns how many; release_some gives n back
  // and returns what release() would after the last. Rejected: a lock per stack — two
  // Ps spawning and retiring thousands of tasks at once queued on it in the kernel.
  std::size_t allocate_some(Stack* out, std::size_t n);
  bool release_some(const Stack* s, std::size_t n) noexcept;

  // A slot's stack size (the option rounded up to pages); hi - lo is kCanaryBytes less.
  std::size_t stack_bytes() const { return stack_bytes_; }
  std::size_t slabs() const;          // slabs mapped
  std::size_t stacks_carved() const;  // slots ever handed out
  std::size_t guarded() const;        // carved slots with a guard (budgeted or slab guard)
  std::size_t cold() const;           // released stacks whose memory was returned (cold list)
  std::size_t hot() const;            // released stacks still resident (hot list)

  // Returns to the OS the memory of hot stacks that stayed surplus since the previous
  // trim (see the file comment); returns how many went cold. Call periodically from a
  // thread that holds no P (it makes syscalls). has_surplus(): hot() > keep_hot.
  std::size_t trim() noexcept;
  bool has_surplus() const;

 private:
  struct Slab {
    std::byte* base;
    std::size_t len;
  };
  void check_released(const Stack& s) const noexcept;  // aborts with a message if foreign
  Stack carve_locked() CORUN_REQUIRES(mu_);
  void map_slab_locked() CORUN_REQUIRES(mu_);    // throws
  bool take_guard_locked() CORUN_REQUIRES(mu_);  // reserve 2 map entries of guard budget
  bool guard_slot_locked(std::byte* slot, bool slab_guard) CORUN_REQUIRES(mu_);
  std::string describe_locked(std::size_t want) const CORUN_REQUIRES(mu_);  // for errors
  void make_cold(Stack* batch, std::size_t n) noexcept;  // takes mu_ per run and at the end
  bool keeps_top_page(const Stack& s) noexcept;          // takes mu_

  // Immutable after construction (any thread may read).
  const std::size_t page_;
  const std::size_t stack_bytes_;
  const std::size_t slot_bytes_;  // page_ + stack_bytes_
  const std::size_t stacks_per_slab_;
  const std::size_t keep_hot_;
  const int numa_node_;
  const bool auto_budget_;

  mutable base::Lock<base::LockRank::stacks> mu_;
  std::vector<Slab> slabs_ CORUN_GUARDED_BY(mu_);
  std::vector<Stack> hot_ CORUN_GUARDED_BY(mu_);           // LIFO
  std::vector<Stack> cold_ CORUN_GUARDED_BY(mu_);          // LIFO
  std::size_t hot_low_ CORUN_GUARDED_BY(mu_) = SIZE_MAX;   // hot_'s minimum since trim()
  std::byte* carve_next_ CORUN_GUARDED_BY(mu_) = nullptr;  // next free slot, newest slab
  std::byte* carve_end_ CORUN_GUARDED_BY(mu_) = nullptr;
  std::size_t carved_ CORUN_GUARDED_BY(mu_) = 0;
  std::size_t guarded_ CORUN_GUARDED_BY(mu_) = 0;
  // Per carved slot (index Stack::slot), whether it is guarded: trim() reads the slot
  // above's (see make_cold). Slots are carved in address order, slab after slab.
  std::vector<bool> slot_guarded_ CORUN_GUARDED_BY(mu_);
  std::size_t budget_guards_ CORUN_GUARDED_BY(mu_) = 0;  // of guarded_, paid from the budget
  long own_budget_left_ CORUN_GUARDED_BY(mu_) = 0;       // explicit mode only (map entries)
  bool guards_stopped_ CORUN_GUARDED_BY(mu_) = false;    // mprotect failed: no more guards
};

// The canary of an unguarded stack: kCanaryBytes at s.canary (one cache line, the top of
// the slot below), each 8-byte word canary_pattern(). Both functions are cheap (8 stores /
// loads) and touch only those bytes; for a guarded stack (s.canary == nullptr) they touch
// nothing (write does nothing, intact is true).
inline constexpr std::size_t kCanaryBytes = 64;
void write_canary(const Stack& s) noexcept;
bool canary_intact(const Stack& s) noexcept;
// This process's pattern: random (getrandom, mixed with the clock and the pid), fixed from
// its first use on, no zero byte (so no zero fill or small integer equals it).
std::uint64_t canary_pattern() noexcept;

// Tests only: replace what is left of the process-wide auto guard budget with map_entries
// (>= 0; 2 per guard), so that a test reaches unguarded stacks without 16'000 live tasks.
// Call before the allocators that should see it carve; guards already set stay. Throws
// std::invalid_argument for a negative count.
void set_auto_guard_budget_for_testing(long map_entries);

// True if p lies in a mapped slab of any allocator of this process, or at most `below`
// bytes under one. Async-signal-safe (reads the fixed slab table only).
bool in_stack_slabs(const void* p, std::size_t below = 0) noexcept;

// Async-signal-safe: write(2)s
//   "corun: task <id> overflowed its stack (<N> KiB; raise CORUN_STACK_KB) — <how>\n"
// to stderr, then abort(). N = stack_bytes / 1024.
[[noreturn]] void report_stack_overflow(std::uint64_t task_id, std::size_t stack_bytes,
                                        const char* how) noexcept;

// Guard-page fault reporting. The scheduler records, per thread, the running task's stack.
struct RunningStack {
  const std::byte* lo = nullptr;
  std::size_t bytes = 0;
  std::uint64_t task_id = 0;
};
// Written by the scheduler at each switch with plain stores (follow them with
// std::atomic_signal_fence(std::memory_order_release) so the compiler keeps them before the
// switch); read only by this thread's SIGSEGV/SIGBUS handler. lo == nullptr: no task runs.
// constinit: no dynamic initialisation, so no TLS wrapper call on access; initial-exec TLS
// model: access from the signal handler never allocates (no __tls_get_addr slow path).
extern thread_local constinit RunningStack tls_running_stack
    __attribute__((tls_model("initial-exec")));

// Process-wide, idempotent, thread-safe. Installs a SIGSEGV/SIGBUS handler
// (SA_ONSTACK|SA_SIGINFO). With a task running on this thread (tls_running_stack, [lo, hi))
// a fault is that task's stack overflow, reported with report_stack_overflow(task_id,
// bytes, how), when
//   - si_addr is in [lo - page, lo): how = "guard page hit";
//   - si_addr is below lo and inside a stack slab (in_stack_slabs): a guard further down,
//     reached through unguarded memory: how = "fault in a guard page below the stack";
//   - the interrupted stack pointer (x86-64, arm64) is below lo and inside a slab or at
//     most a stack's size + a page under one (a frame jumped past the slab guard):
//     how = "stack pointer below the stack at a fault".
// Otherwise it restores the handler that was there before (or SIG_DFL) and returns, so the
// fault re-executes and is handled as if corun had never been there (a kill()-sent signal
// is re-raised). Throws std::system_error if sigaction fails. A no-op under ASan/TSan,
// which own SEGV handling (canaries still work).
void install_overflow_handler();
// Per thread: give this thread a 64 KiB signal stack (plus a guard page), so the handler
// can run when the task stack is exhausted. Idempotent. Throws std::system_error on failure.
// thread_altstack_teardown() disables and frees it (call before the thread exits).
// No-ops under ASan/TSan (they manage the thread's alternate stack themselves).
void thread_altstack_setup();
void thread_altstack_teardown() noexcept;

}  // namespace corun::os
