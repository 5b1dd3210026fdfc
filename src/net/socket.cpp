// net/socket.cpp — the socket record's call count and close (contract: socket.hpp).
#include "net/socket.hpp"

#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <stdexcept>

#include "net/addr.hpp"
#include "sched/proc.hpp"

namespace corun::net::detail {

void Socket::finalise() noexcept {
  pd->close();
  ::close(fd);
}

void Socket::release_call() noexcept {
  std::uint32_t v = state.load(std::memory_order_acquire);
  for (;;) {
    if ((v & ~(kOne - 1)) == kOne && (v & kClosed) && !(v & kDead)) {
      // The last call out of a closed record: claim the descriptor while still counted.
      if (!state.compare_exchange_weak(v, v | kDead, std::memory_order_acq_rel)) continue;
      finalise();
      v |= kDead;
    }
    if (state.compare_exchange_weak(v, v - kOne, std::memory_order_acq_rel)) break;
  }
  v -= kOne;
  if ((v & ~(kOne - 1)) == 0 && (v & kGone)) delete this;
}

void Socket::release_handle() noexcept {
  close();
  std::uint32_t v = state.fetch_or(kGone, std::memory_order_acq_rel);
  if ((v & ~(kOne - 1)) == 0) delete this;  // no call left: finalised already (close did)
}

void Socket::close() noexcept {
  // Counted as a call itself, so the close and the last call agree on who finalises.
  enter_call();
  // Only the first close evicts: after finalisation the poll record may serve another
  // descriptor already.
  if (!(state.fetch_or(kClosed, std::memory_order_acq_rel) & kClosed)) pd->evict();
  release_call();
}

Call::Call(Socket* s, const char* op) : s_(s) {
  if (!s) throw_closed(op);
  if (!sched::in_task())
    throw std::logic_error(std::string("corun::net: ") + op +
                           " called outside a task (net calls are made from tasks)");
  if (s->enter_call() & Socket::kClosed) {
    s->release_call();
    throw_closed(op);
  }
}

void throw_closed(const char* op) {
  throw std::system_error(EBADF, std::generic_category(),
                          std::string("corun::net: ") + op + " on a closed connection");
}

void throw_errno(int err, const char* op) {
  throw std::system_error(err, std::generic_category(), std::string("corun::net: ") + op);
}

void throw_poll(sched::PollResult r, const char* op) {
  if (r == sched::PollResult::ready) return;
  if (r == sched::PollResult::timeout)
    throw timeout_error(std::string("corun::net: ") + op + ": i/o timeout (deadline passed)");
  throw_closed(op);
}

Socket* adopt(int fd) {
  sched::PollDesc* pd;
  try {
    pd = sched::PollDesc::open(fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  return new Socket(fd, pd);
}

std::string sock_name(int fd, bool peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                : getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0) throw_errno(errno, peer ? "remote_addr" : "local_addr");
  return format(reinterpret_cast<sockaddr*>(&ss), len);
}

void socket_release(Socket* s) noexcept {
  s->release_handle();
}

int socket_fd(const Socket* s) noexcept {
  if (!s || (s->state.load(std::memory_order_acquire) & Socket::kClosed)) return -1;
  return s->fd;
}

}  // namespace corun::net::detail
