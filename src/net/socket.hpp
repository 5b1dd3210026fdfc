// net/socket.hpp — the record behind a Conn or Listener: the descriptor, its poll record,
// the locks that serialise reads and writes, and the count of calls using it.
//
// Lifetimes: the record's memory belongs to the handle (Conn/Listener) and goes with its
// destructor; destroying a handle while another task is inside one of its calls is a
// use-after-free, as for any C++ object. The descriptor's number belongs to the calls:
// close() marks the record closed and evicts its waiters, but ::close(fd) runs only once no
// call uses it any more (Go's fdMutex reference count), so a racing read never reads a
// recycled descriptor number.
//
// state_: bit 0 closed, bit 31 finalised (fd closed), bits 1..30 the calls in progress
// (each adds 2). acquire on entry (the call sees the open descriptor's setup), acq_rel on
// exit (the finaliser sees every call's effects). The transition to "closed, no calls" is
// claimed by one CAS (to kDead), so the descriptor is closed exactly once.
// Rejected: one word combining the call count with the read and write locks (Go's
// fdMutex: one RMW less per call; later, if perf shows it).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <system_error>

#include <corun/net.hpp>
#include <corun/sync.hpp>

#include "sched/netpoll.hpp"

namespace corun::net::detail {

struct Socket {
  Socket(int fd, sched::PollDesc* pd) noexcept : fd(fd), pd(pd) {}
  const int fd;
  sched::PollDesc* const pd;
  corun::Mutex rmu;  // serialises reads and accepts
  corun::Mutex wmu;  // serialises writes, so one write's bytes stay contiguous
  std::atomic<std::uint32_t> state{0};

  static constexpr std::uint32_t kClosed = 1, kOne = 2, kDead = 0x80000001u;

  // Marks it closed, wakes its waiters; the descriptor closes with the last call.
  void close() noexcept;
  void release_call() noexcept;

 private:
  void finalise() noexcept;
};

// A call in progress: holds the descriptor open. Throws std::system_error(EBADF) on an
// empty or closed handle, std::logic_error outside a task.
class Call {
 public:
  explicit Call(Socket* s, const char* op);
  ~Call() { s_->release_call(); }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

 private:
  Socket* s_;
};

// Throws for a poll result that is not ready: timeout_error, or EBADF for closing.
void throw_poll(sched::PollResult r, const char* op);
[[noreturn]] void throw_errno(int err, const char* op);
[[noreturn]] void throw_closed(const char* op);

// A new non-blocking socket record for fd (registered with the poller), or throws (fd is
// closed then).
Socket* adopt(int fd);
std::string sock_name(int fd, bool peer);

}  // namespace corun::net::detail
