// net/listener.cpp — listen and Listener (contract: include/corun/net.hpp).
//
// accept4 on a non-blocking listening socket; on EAGAIN the task parks on the poll
// record's read side. Out of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM) the pending
// connection stays queued and the listener stays readable, so edge-triggered readiness
// will not come again: the task waits on its own read deadline instead (5 ms doubling to
// 1 s, Go's http.Server backoff), parked, and a close still wakes it at once. The
// listener has no user-visible deadline, so that timer is free for this.
// An accept that took a connection ends at a preemption point, after its lock is released
// (detail::end_slice_if_asked; conn.cpp says why).
// Rejected: sleeping in the backoff (a close would wait out the sleep); retrying at once
// (spins a core for as long as the process is out of descriptors).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <mutex>

#include <corun/net.hpp>

#include "net/addr.hpp"
#include "net/socket.hpp"
#include "os/thread.hpp"
#include "sched/proc.hpp"

namespace corun::net {

using detail::Call;
using detail::Socket;

namespace {

int system_backlog() {
  static const int v = [] {
    int n = SOMAXCONN;
    if (FILE* f = std::fopen("/proc/sys/net/core/somaxconn", "re")) {
      if (std::fscanf(f, "%d", &n) != 1 || n <= 0) n = SOMAXCONN;
      std::fclose(f);
    }
    return n;
  }();
  return v;
}

Socket* listen_one(const detail::SockAddr& a, const ListenOptions& o) {
  int fd = ::socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0) detail::throw_errno(errno, "listen: socket");
  int one = 1;
  auto fail = [&](const char* what) {
    int err = errno;
    ::close(fd);
    detail::throw_errno(err, what);
  };
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) fail("listen: SO_REUSEADDR");
  if (o.reuse_port && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
    fail("listen: SO_REUSEPORT");
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a.ss), a.len) != 0) fail("listen: bind");
  if (::listen(fd, o.backlog > 0 ? o.backlog : system_backlog()) != 0) fail("listen");
  return detail::adopt(fd);
}

}  // namespace

Listener listen(std::string_view host_port, const ListenOptions& o) {
  if (!sched::in_task())
    throw std::logic_error(
        "corun::net: listen called outside a task (net calls are made from tasks)");
  if (o.backlog < 0)
    throw std::invalid_argument("corun::net: ListenOptions::backlog " + std::to_string(o.backlog) +
                                ": expected 0 (the system's maximum) or a positive number");
  std::vector<detail::SockAddr> addrs = detail::resolve(host_port, true);
  std::exception_ptr last;
  for (const auto& a : addrs) {
    try {
      return Listener(listen_one(a, o));
    } catch (...) {
      last = std::current_exception();
    }
  }
  std::rethrow_exception(last);
}

namespace {
Socket* accept_locked(Socket* s_);  // the accepted connection's new socket record
}  // namespace

Conn Listener::accept() {
  Conn c(accept_locked(s_.get()));
  detail::end_slice_if_asked();
  return c;
}

namespace {
Socket* accept_locked(Socket* s_) {
  Call c(s_, "accept");
  std::lock_guard<corun::Mutex> g(s_->rmu);
  detail::throw_poll(s_->pd->prepare(false), "accept");
  std::int64_t backoff = 0;
  for (;;) {
    int fd = ::accept4(s_->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return detail::adopt(fd);
    }
    int err = errno;
    if (err == EINTR || err == ECONNABORTED) continue;
    if (err == EAGAIN) {
      detail::throw_poll(s_->pd->wait(false), "accept");
      continue;
    }
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
      backoff = backoff ? (backoff * 2 > 1'000'000'000 ? 1'000'000'000 : backoff * 2) : 5'000'000;
      s_->pd->set_deadline(static_cast<std::int64_t>(os::monotonic_ns()) + backoff, true, false);
      sched::PollResult r = s_->pd->wait(false);
      s_->pd->set_deadline(0, true, false);
      if (r == sched::PollResult::closing) detail::throw_closed("accept");
      continue;
    }
    detail::throw_errno(err, "accept");
  }
}

}  // namespace

void Listener::close() noexcept {
  if (s_) s_->close();
}

std::uint16_t Listener::port() const {
  Call c(s_.get(), "port");
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(s_->fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    detail::throw_errno(errno, "port");
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

std::string Listener::addr() const {
  Call c(s_.get(), "addr");
  return detail::sock_name(s_->fd, false);
}

}  // namespace corun::net
