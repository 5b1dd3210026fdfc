// net/conn.cpp — Conn's calls and dial (contract: include/corun/net.hpp).
//
// Every call follows Go's internal/poll.FD pattern: count the call (the descriptor stays
// open), take the direction's lock, prepare the poll record (closed or past the deadline:
// fail before touching data), then try the syscall and wait on the poll record only on
// EAGAIN. A read that finds data never parks; a write parks only when the socket buffer is
// full. send() uses MSG_NOSIGNAL: a reset peer gives EPIPE, never SIGPIPE.
// A read after a short one (0 < n < asked) waits for readiness first, so a
// request/response exchange costs no EAGAIN read (nginx's `ready = 0` after a short recv).
// Sound with edge-triggered epoll because a short TCP read leaves the receive queue empty,
// so any byte arriving later raises a new edge; an edge raised by bytes that read took
// costs one spurious EAGAIN read, no more. A FIN or reset that arrived with the data is
// not in the queue, and the next read reports it without a new edge: so once the poller
// has seen a hang-up on the socket, reads go to the kernel first again
// (PollDesc::wait_after_drain). Only a short read with data counts: after EOF (0) or an
// error the next read goes to the kernel too.
// Every read, write and accept ends at a preemption point (end_slice_if_asked), also when
// it did not block: a task whose reads always find data (a fast peer) or whose writes
// always find room would otherwise keep its P for as long as the peer keeps up, and at
// 1 P nothing else would run: the tests' ReadWriteProlongedTimeout took 3.7 s at 1 P
// against 0.02 s at 2 Ps, its server writing 1.3 million 1-byte sends before its client
// got a turn. Go preempts such a goroutine asynchronously; corun cannot, so I/O calls are
// where it looks (as a channel poll that finds nothing does).
// Rejected: reading into a per-conn buffer (users bring their own; no copy, no memory per
// idle connection); a write timeout per call (Go's deadlines are per conn, absolute); the
// check inside the call, with its lock held (a task that yields there would hold the
// conn's direction lock through its wait in the run queue).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <utility>

#include <corun/net.hpp>

#include "net/addr.hpp"
#include "net/socket.hpp"
#include "os/thread.hpp"
#include "sched/park.hpp"
#include "sched/proc.hpp"

namespace corun::net {

using detail::Call;
using detail::Socket;

namespace {

std::int64_t to_ns(Clock::time_point t) noexcept {
  if (t == Clock::time_point{}) return 0;
  std::int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  return ns > 0 ? ns : 1;  // before the clock's epoch: long past, expires at once
}

// The read or write body, with the call counted and the direction's lock held.
std::size_t read_locked(Socket* s, std::span<std::byte> buf);
std::size_t write_locked(Socket* s, std::span<const std::byte> buf);

}  // namespace

void detail::end_slice_if_asked() noexcept {
  // One relaxed load when no slice has ended (sched/proc.hpp).
  if (sched::preempt_requested()) sched::yield_if_preempted();
}

std::size_t Conn::read(std::span<std::byte> buf) {
  const std::size_t n = read_locked(s_.get(), buf);
  detail::end_slice_if_asked();
  return n;
}

std::size_t Conn::write(std::span<const std::byte> buf) {
  const std::size_t n = write_locked(s_.get(), buf);
  detail::end_slice_if_asked();
  return n;
}

namespace {

std::size_t read_locked(Socket* s_, std::span<std::byte> buf) {
  Call c(s_, "read");
  std::lock_guard<corun::Mutex> g(s_->rmu);
  if (buf.empty()) return 0;
  // Drained by the last read: wait for the next edge before the syscall (an edge already
  // recorded returns at once; a hang-up seen reads at once). It checks closing and the
  // deadline as prepare() does, and keeps a recorded edge, which prepare()'s reset drops.
  const bool drained = std::exchange(s_->rdrained, false);
  detail::throw_poll(drained ? s_->pd->wait_after_drain() : s_->pd->prepare(false), "read");
  for (;;) {
    ssize_t n = ::read(s_->fd, buf.data(), buf.size());
    if (n >= 0) {
      s_->rdrained = n > 0 && static_cast<std::size_t>(n) < buf.size();
      return static_cast<std::size_t>(n);
    }
    int err = errno;
    if (err == EINTR) continue;
    if (err != EAGAIN) detail::throw_errno(err, "read");
    detail::throw_poll(s_->pd->wait(false), "read");
  }
}

std::size_t write_locked(Socket* s_, std::span<const std::byte> buf) {
  Call c(s_, "write");
  std::lock_guard<corun::Mutex> g(s_->wmu);
  detail::throw_poll(s_->pd->prepare(true), "write");
  std::size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = ::send(s_->fd, buf.data() + done, buf.size() - done, MSG_NOSIGNAL);
    if (n >= 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    int err = errno;
    if (err == EINTR) continue;
    if (err != EAGAIN) detail::throw_errno(err, "write");
    detail::throw_poll(s_->pd->wait(true), "write");
  }
  return done;
}

}  // namespace

void Conn::set_deadline(Clock::time_point t) {
  Call c(s_.get(), "set_deadline");
  s_->pd->set_deadline(to_ns(t), true, true);
}

void Conn::set_read_deadline(Clock::time_point t) {
  Call c(s_.get(), "set_read_deadline");
  s_->pd->set_deadline(to_ns(t), true, false);
}

void Conn::set_write_deadline(Clock::time_point t) {
  Call c(s_.get(), "set_write_deadline");
  s_->pd->set_deadline(to_ns(t), false, true);
}

void Conn::close() noexcept {
  if (s_) s_->close();
}

void Conn::close_write() {
  Call c(s_.get(), "close_write");
  if (::shutdown(s_->fd, SHUT_WR) != 0) detail::throw_errno(errno, "close_write");
}

std::string Conn::local_addr() const {
  Call c(s_.get(), "local_addr");
  return detail::sock_name(s_->fd, false);
}

std::string Conn::remote_addr() const {
  Call c(s_.get(), "remote_addr");
  return detail::sock_name(s_->fd, true);
}

namespace {

// One connection attempt; the socket record on success. Throws timeout_error or
// std::system_error.
Socket* connect_one(const detail::SockAddr& a, std::int64_t deadline) {
  int fd = ::socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0) detail::throw_errno(errno, "dial: socket");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  Socket* s = detail::adopt(fd);  // closes fd if it throws
  try {
    int rc;
    do {
      rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a.ss), a.len);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      if (errno != EINPROGRESS) detail::throw_errno(errno, "dial");
      if (deadline) s->pd->set_deadline(deadline, false, true);
      for (;;) {
        detail::throw_poll(s->pd->wait(true), "dial");
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err == 0) break;
        if (err == EINPROGRESS || err == EALREADY || err == EINTR) continue;
        detail::throw_errno(err, "dial");
      }
      if (deadline) s->pd->set_deadline(0, false, true);
    }
  } catch (...) {
    detail::socket_release(s);
    throw;
  }
  return s;
}

}  // namespace

Conn dial(std::string_view host_port, Duration timeout) {
  if (!sched::in_task())
    throw std::logic_error(
        "corun::net: dial called outside a task (net calls are made from tasks)");
  std::int64_t deadline = 0;
  if (timeout > Duration::zero()) {
    std::int64_t now = static_cast<std::int64_t>(os::monotonic_ns());
    std::int64_t t = timeout.count();
    deadline = t > INT64_MAX - now ? 0 : now + t;  // Duration::max(): no deadline at all
  }
  std::vector<detail::SockAddr> addrs = detail::resolve(host_port, false);
  std::exception_ptr last;
  for (const auto& a : addrs) {
    if (deadline && static_cast<std::int64_t>(os::monotonic_ns()) >= deadline)
      throw timeout_error("corun::net: dial " + std::string(host_port) + ": i/o timeout");
    try {
      return Conn(connect_one(a, deadline));
    } catch (const timeout_error&) {
      throw;
    } catch (...) {
      last = std::current_exception();
    }
  }
  std::rethrow_exception(last);
}

}  // namespace corun::net
