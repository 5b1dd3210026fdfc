// sched/netpoll_epoll.cpp — the poller's Linux mechanism (Go's netpoll_epoll.go): one
// epoll instance per runtime, descriptors registered once, edge-triggered, for input and
// output; an eventfd to break a blocked poll.
//
// Timeouts: epoll_pwait2 takes a timespec, so a poll blocks until the earliest timer to
// the nanosecond (within the thread's timer slack, CORUN_TIMERSLACK_NS) — Go's netpoll
// rounds its delay to milliseconds for epoll_wait. Kernels before 5.11 lack epoll_pwait2
// (ENOSYS): a timerfd armed at the absolute deadline sits in the epoll set instead, and
// the poll blocks in epoll_wait without a timeout (one more syscall per timed poll).
// Invariants: the eventfd and the timerfd are registered level-triggered with data.ptr
// naming them (never a PollDesc address); every other event's data.ptr is a PollDesc.
// Rejected: EPOLLONESHOT (a re-arm syscall per wait); io_uring (not measured yet: a
// poll-based readiness model keeps read/write as plain syscalls on the task's stack).
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <cerrno>
#include <system_error>

#include "os/thread.hpp"
#include "sched/netpoll.hpp"
#include "sched/timer_heap.hpp"

namespace corun::sched::sys {

namespace {
// Markers for the two internal descriptors (any address that is not a PollDesc).
char kEventMark, kTimerMark;
// epoll_pwait2 exists (cleared on the first ENOSYS; process-wide: the kernel is one).
// relaxed: a sticky hint; a racing poller at worst tries epoll_pwait2 once more.
std::atomic<bool> g_pwait2{true};
}  // namespace

void init(Netpoll& np) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) throw std::system_error(errno, std::generic_category(), "corun: epoll_create1");
  int ev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (ev < 0) {
    int e = errno;
    ::close(ep);
    throw std::system_error(e, std::generic_category(), "corun: eventfd for the poller");
  }
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.ptr = &kEventMark;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, ev, &e) != 0) {
    int err = errno;
    ::close(ev);
    ::close(ep);
    throw std::system_error(err, std::generic_category(), "corun: epoll_ctl(eventfd)");
  }
  np.epfd = ep;
  np.evfd = ev;
}

int open(Netpoll& np, int fd, PollDesc* pd) noexcept {
  epoll_event e{};
  e.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  e.data.ptr = pd;
  return epoll_ctl(np.epfd, EPOLL_CTL_ADD, fd, &e) == 0 ? 0 : errno;
}

void close(Netpoll& np, int fd) noexcept {
  epoll_event e{};  // (a non-null event for kernels before 2.6.9)
  epoll_ctl(np.epfd, EPOLL_CTL_DEL, fd, &e);
}

namespace {
// The timerfd fallback: created on first need, armed at `until` (absolute), or disarmed.
int arm_timerfd(Netpoll& np, std::int64_t until) noexcept {
  if (np.tfd < 0) {
    int t = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (t < 0) return errno;
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.ptr = &kTimerMark;
    if (epoll_ctl(np.epfd, EPOLL_CTL_ADD, t, &e) != 0) {
      int err = errno;
      ::close(t);
      return err;
    }
    np.tfd = t;
  }
  itimerspec its{};
  if (until > 0) its.it_value = os::to_timespec(static_cast<std::uint64_t>(until));
  return timerfd_settime(np.tfd, TFD_TIMER_ABSTIME, &its, nullptr) == 0 ? 0 : errno;
}
}  // namespace

int poll(Netpoll& np, std::int64_t until, Event* out, int max) noexcept {
  constexpr int kBatch = 128;
  epoll_event evs[kBatch];
  if (max > kBatch) max = kBatch;
  int n;
  if (until == 0) {
    n = epoll_wait(np.epfd, evs, max, 0);
  } else if (until == TimerHeap::kNever) {
    n = epoll_wait(np.epfd, evs, max, -1);
  } else {
    std::int64_t now = static_cast<std::int64_t>(os::monotonic_ns());
    std::int64_t d = until > now ? until - now : 0;
    n = -1;
    errno = ENOSYS;
    if (!np.timerfd && g_pwait2.load(std::memory_order_relaxed)) {
      timespec ts{static_cast<time_t>(d / 1'000'000'000), static_cast<long>(d % 1'000'000'000)};
      n = epoll_pwait2(np.epfd, evs, max, &ts, nullptr);
      if (n < 0 && errno == ENOSYS) g_pwait2.store(false, std::memory_order_relaxed);
    }
    if (n < 0 && errno == ENOSYS) {
      // The poller's own thread only arms the timerfd: np.tfd is touched by the thread
      // that blocks in the poller, one at a time (the idle waiter).
      if (d == 0 || arm_timerfd(np, until) != 0)
        n = epoll_wait(np.epfd, evs, max, d == 0 ? 0 : 1 + static_cast<int>(d / 1'000'000));
      else
        n = epoll_wait(np.epfd, evs, max, -1);
    }
  }
  if (n <= 0) return 0;  // timeout, or EINTR: the caller looks again
  int k = 0;
  for (int i = 0; i < n; i++) {
    const epoll_event& e = evs[i];
    if (e.data.ptr == &kEventMark) {
      // Only a blocking poll consumes a break (Go does the same): a non-blocking one
      // racing with the blocked waiter would otherwise drain it before the waiter's
      // level-triggered re-check, and the waiter would sleep on.
      if (until != 0) {
        std::uint64_t v;
        while (::read(np.evfd, &v, sizeof v) < 0 && errno == EINTR) {
        }
        np.wake_sig.store(0, std::memory_order_release);
      }
      continue;
    }
    if (e.data.ptr == &kTimerMark) {
      std::uint64_t v;
      while (::read(np.tfd, &v, sizeof v) < 0 && errno == EINTR) {
      }
      continue;
    }
    const std::uint32_t ev = e.events;
    Event& o = out[k++];
    o.pd = static_cast<PollDesc*>(e.data.ptr);
    o.read = ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR);
    o.write = ev & (EPOLLOUT | EPOLLHUP | EPOLLERR);
    o.hup = ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR);
  }
  return k;
}

void wakeup(Netpoll& np) noexcept {
  std::uint64_t one = 1;
  while (::write(np.evfd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void destroy(Netpoll& np) noexcept {
  if (np.tfd >= 0) ::close(np.tfd);
  if (np.evfd >= 0) ::close(np.evfd);
  if (np.epfd >= 0) ::close(np.epfd);
  np.tfd = np.evfd = np.epfd = -1;
}

}  // namespace corun::sched::sys
