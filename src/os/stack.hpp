// os/stack.hpp — task stacks: carved from large slabs, guard pages while the map budget
// allows (and always under each slab), a random canary at the bottom of every unguarded
// stack, and the overflow fault reporter.
//
// What it is: StackAllocator hands out fixed-size stacks [lo, hi). It maps memory in slabs
// (one mmap of ~16 MiB each, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE|MAP_STACK,
// MADV_NOHUGEPAGE) and carves them into slots of one guard page + the stack:
//
//     slab: | guard | stack 0 | guard | stack 1 | ... | guard | stack n-1 |
//                   ^lo       ^hi
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
// protected by a canary: kCanaryBytes at [lo, lo + kCanaryBytes) filled with a per-process
// random 64-bit pattern with no zero byte (canary_pattern()), which the scheduler checks
// with canary_intact() whenever such a task leaves its CPU (park, yield, exit: see
// sched/task.cpp). A guard catches an overflow at the faulting instruction; a canary later.
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
//  - Unguarded stack, the overflow writes over the canary (any contiguous write, a zero fill
//    included: the pattern is random and never zero) and returns without a fault: reported
//    with the task's id when the task next parks, yields or exits. Until then a neighbour it
//    reached (more than a page below lo) may run on another P with a damaged top: not
//    guaranteed harmless.
//  - Not detected: an overflow that skips the canary's 64 bytes (frames with unwritten holes
//    just there) and returns before parking, and a wild pointer write into a neighbour's
//    top. Up to one page below lo (the unguarded slot's RW guard page) nobody is harmed.
//
// Invariants:
//  - Every slot is page-aligned; stack_bytes() is a multiple of the page size; hi-lo ==
//    stack_bytes() for every Stack handed out.
//  - A stack is in exactly one place: handed out, on the hot list, on the cold list, or not
//    yet carved. Hot stacks are as their last user left them; cold stacks were
//    madvise(MADV_DONTNEED)'d (memory returned, they read as zeros).
//  - release() only pushes on the hot list: no syscall on the task-exit path. Memory goes
//    back to the OS in trim(), which the runtime's monitor thread calls periodically: it
//    moves to the cold list the hot stacks that were surplus for a whole period (beyond
//    keep_hot, and never needed since the previous trim: the hot list's low-water mark),
//    oldest first, sorted by address, one madvise per run of neighbouring slots. A mass
//    exit of a million tasks then costs a few thousand madvise calls in the background,
//    not one TLB shootdown (an IPI to every CPU of the process) per task.
//  - allocate() (re)writes the canary of every unguarded stack it hands out, so
//    canary_intact() is true for every stack handed out. A guarded stack has no canary
//    (write_canary does nothing, canary_intact is true): its page stays untouched.
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
//  - A zero canary (the previous design; free: untouched pages read as zeros): a zero fill
//    (`std::array<char, N> buf{}`, memset 0) overwrote it with the same bytes, undetected.
//    The random one costs one resident page per live unguarded stack (written at allocate):
//    perf ParkedTasks, 200'000 tasks of 64 KiB (184'000 unguarded), 4'098 -> 7'843 B/task
//    and ~11 -> ~19 us/op to spawn one (the page fault; noisy 2-vCPU VM). That is the price
//    of catching zero fills; the next item is how to stop paying it.
//  - Not done (yet): the canary in the top bytes of the neighbour below, whose top page is
//    resident anyway (no extra memory; it then catches exactly the overflows that reach a
//    neighbour). trim()'s madvise of a cold neighbour would wipe it, and the task record
//    would have to move down to make room.
//  - Segmented / growable stacks (Go): needs compiler support for C++ frames.
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
// write_canary/canary_intact touch only the given stack. install_overflow_handler is
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
// [lo - page, lo) is PROT_NONE.
struct Stack {
  std::byte* lo = nullptr;
  std::byte* hi = nullptr;
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
  // new slab. An unguarded stack gets its canary written (so its bottom page is resident).
  // Throws StackAllocError (a std::bad_alloc) or std::system_error if a slab cannot be
  // mapped. May print the one-per-process unguarded-stack warning (auto budget only).
  Stack allocate();
  // Gives a stack back (must come from this allocator's allocate() and not be in use).
  // Aborts with a message if s is not stack_bytes() long (cheap sanity check). Returns
  // true if the hot list now exceeds keep_hot (time to schedule a trim()).
  bool release(const Stack& s) noexcept;

  std::size_t stack_bytes() const { return stack_bytes_; }  // rounded usable size
  std::size_t slabs() const;                                // slabs mapped
  std::size_t stacks_carved() const;                        // slots ever handed out
  std::size_t guarded() const;  // carved slots with a guard (budgeted or slab guard)
  std::size_t cold() const;     // released stacks whose memory was returned (cold list)
  std::size_t hot() const;      // released stacks still resident (hot list)

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
  Stack carve_locked() CORUN_REQUIRES(mu_);
  void map_slab_locked() CORUN_REQUIRES(mu_);    // throws
  bool take_guard_locked() CORUN_REQUIRES(mu_);  // reserve 2 map entries of guard budget
  bool guard_slot_locked(std::byte* slot, bool slab_guard) CORUN_REQUIRES(mu_);
  std::string describe_locked(std::size_t want) const CORUN_REQUIRES(mu_);  // for errors
  void make_cold(Stack* batch, std::size_t n) noexcept;                     // takes mu_ at the end

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
  std::size_t budget_guards_ CORUN_GUARDED_BY(mu_) = 0;  // of guarded_, paid from the budget
  long own_budget_left_ CORUN_GUARDED_BY(mu_) = 0;       // explicit mode only (map entries)
  bool guards_stopped_ CORUN_GUARDED_BY(mu_) = false;    // mprotect failed: no more guards
};

// The canary of an unguarded stack: kCanaryBytes at [lo, lo + kCanaryBytes) (one cache
// line), each 8-byte word canary_pattern(). Both functions are cheap (8 stores / loads) and
// touch only s; for a guarded stack they touch nothing (write does nothing, intact is true).
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
