// net/socket.hpp — the record behind a Conn or Listener: the descriptor, its poll record,
// the locks that serialise reads and writes, and the count of calls using it.
//
// Lifetimes: the record lives while its handle (Conn/Listener) or a call holds it; the
// descriptor's number until the record is closed and no call uses it (Go's fdMutex
// reference count), so a racing read never reads a recycled descriptor number, and a task
// woken by close() may still be unwinding out of accept() after the handle is destroyed
// (a listener closed and dropped by the main task as it returns).
//
// state: bit 0 closed, bit 1 handle gone, bit 2 finalised (fd closed), bits 3.. the calls
// in progress (each adds kOne; close() and finalisation count as one). Entering: acquire
// (the call sees the open descriptor's setup); leaving: acq_rel (whoever finalises or
// frees sees every call's effects). The last call out of a closed record claims
// finalisation by CAS while still counted, finalises, then leaves; whoever brings the count
// to zero after the handle went frees the record — so finalising and freeing each happen
// exactly once, and never concurrently with each other.
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
  // The last read returned 0 < n < asked: the receive queue was empty then, so the next
  // read waits for an edge before its syscall (conn.cpp). Guarded by rmu.
  bool rdrained = false;
  corun::Mutex wmu;  // serialises writes, so one write's bytes stay contiguous
  std::atomic<std::uint32_t> state{0};

  static constexpr std::uint32_t kClosed = 1, kGone = 2, kDead = 4, kOne = 8;

  // Marks it closed, wakes its waiters; the descriptor closes with the last call.
  void close() noexcept;
  // Returns the state before (kClosed set: the caller leaves at once).
  std::uint32_t enter_call() noexcept { return state.fetch_add(kOne, std::memory_order_acquire); }
  void release_call() noexcept;
  void release_handle() noexcept;  // the handle's destructor: closes, frees when unused

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

// Where every read, write and accept ends, after its locks are released: yields if the
// caller's P was asked to end its time slice (conn.cpp's header says why).
void end_slice_if_asked() noexcept;

}  // namespace corun::net::detail
