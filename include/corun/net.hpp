// corun/net.hpp — TCP connections and listeners with deadlines (API.md "Net"), Go's net
// semantics on the runtime's network poller.
//
// A Conn or Listener owns a non-blocking socket registered once, edge-triggered, with the
// runtime's epoll instance. A task whose read, write or accept would block parks on the
// socket's poll record until the poller reports readiness, a deadline passes, or the
// socket is closed; its P runs other tasks meanwhile. Deadlines are absolute
// (Clock::time_point, CLOCK_MONOTONIC); each is one timer in the heap of the P of the task
// that set it, so moving a deadline before every read costs one timer reset.
//
// Thread safety: every member may be called concurrently from different tasks; concurrent
// reads (and concurrent writes) are serialised, so one write's bytes stay contiguous.
// close() while another task is blocked on the socket wakes it with EBADF. The socket is
// closed (its number freed for reuse) only when the last call using it has returned.
//
// Beyond API.md: default-constructed (empty) Conn and Listener (their calls throw EBADF),
// write(std::string_view), native_handle(), ListenOptions (SO_REUSEPORT, backlog) and
// dial's default timeout (none).
// Rejected: a Conn copyable through shared ownership (Go's *net.TCPConn is shared by
// pointer; in C++ a move-only handle says who closes it, and tasks that share one pass a
// reference); exceptions for EOF (read returns 0 at EOF, as read(2) does).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <corun/time.hpp>

namespace corun::net {

// A read, write, accept or dial did not finish before its deadline. The conn stays
// usable: move the deadline and call again.
struct timeout_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {
struct Socket;  // src/net/socket.hpp: the descriptor, its poll record, its locks
void socket_release(Socket* s) noexcept;
int socket_fd(const Socket* s) noexcept;

// The one reference a Conn or Listener holds on its socket record: move-only; dropping it
// closes the socket (the record lives on while a call still uses it).
class SocketRef {
 public:
  SocketRef() noexcept = default;
  explicit SocketRef(Socket* s) noexcept : s_(s) {}
  SocketRef(SocketRef&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  SocketRef& operator=(SocketRef&& o) noexcept {
    if (this != &o) {
      if (s_) socket_release(s_);
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  SocketRef(const SocketRef&) = delete;
  SocketRef& operator=(const SocketRef&) = delete;
  ~SocketRef() {
    if (s_) socket_release(s_);
  }
  Socket* get() const noexcept { return s_; }
  Socket* operator->() const noexcept { return s_; }
  explicit operator bool() const noexcept { return s_ != nullptr; }
  int fd() const noexcept { return socket_fd(s_); }  // -1 when empty or closed

 private:
  Socket* s_ = nullptr;
};
}  // namespace detail

class Conn {
 public:
  Conn() noexcept = default;  // empty: every call throws std::system_error(EBADF)
  Conn(Conn&&) noexcept = default;
  Conn& operator=(Conn&&) noexcept = default;  // closes what this held
  ~Conn() = default;                           // closes

  // Returns as soon as 1..buf.size() bytes are read; 0 at EOF, and at once for an empty
  // buffer. Throws timeout_error past the read deadline, std::system_error otherwise
  // (ECONNRESET, EBADF once closed, ...).
  std::size_t read(std::span<std::byte> buf);
  // Writes all of buf and returns buf.size(). Throws timeout_error past the write
  // deadline (a prefix may have been sent), std::system_error otherwise (EPIPE or
  // ECONNRESET for a reset peer; never SIGPIPE).
  std::size_t write(std::span<const std::byte> buf);
  std::size_t write(std::string_view s) {
    return write(std::as_bytes(std::span<const char>(s.data(), s.size())));
  }

  // Absolute deadlines; Clock::time_point{} clears. A deadline set, moved or cleared
  // while a task is blocked applies to that call; one already past fails the next call
  // at once, even if data is ready.
  void set_deadline(Clock::time_point t);  // both directions
  void set_read_deadline(Clock::time_point t);
  void set_write_deadline(Clock::time_point t);

  void close() noexcept;  // idempotent; wakes blocked tasks with EBADF
  void close_write();     // half-close: the peer reads EOF; this side can still read

  std::string local_addr() const;                         // "127.0.0.1:8080", "[::1]:8080"
  std::string remote_addr() const;                        // the peer, same form
  int native_handle() const noexcept { return s_.fd(); }  // -1 when empty or closed
  explicit operator bool() const noexcept { return bool(s_); }

 private:
  friend class Listener;
  friend Conn dial(std::string_view host_port, Duration timeout);
  explicit Conn(detail::Socket* s) noexcept : s_(s) {}
  detail::SocketRef s_;
};

struct ListenOptions {
  // SO_REUSEPORT: several listeners on one address, the kernel spreading connections
  // over their accept queues (one listener and accept loop per P).
  bool reuse_port = false;
  int backlog = 0;  // 0: the system's maximum (net.core.somaxconn)
};

class Listener {
 public:
  Listener() noexcept = default;
  Listener(Listener&&) noexcept = default;
  Listener& operator=(Listener&&) noexcept = default;  // closes what this held
  ~Listener() = default;                               // closes

  // The next connection, TCP_NODELAY on. Out of descriptors (EMFILE, ENFILE), it backs
  // off (5 ms doubling to 1 s, parked, as Go's http.Server does) and tries again, so a
  // server rides out fd exhaustion without spinning a core. Throws std::system_error
  // (EBADF once closed).
  Conn accept();
  void close() noexcept;  // wakes a pending accept (EBADF); accepted conns stay open
  std::uint16_t port() const;
  std::string addr() const;                               // the bound address, "host:port"
  int native_handle() const noexcept { return s_.fd(); }  // -1 when empty or closed
  explicit operator bool() const noexcept { return bool(s_); }

 private:
  friend Listener listen(std::string_view host_port, const ListenOptions& o);
  explicit Listener(detail::Socket* s) noexcept : s_(s) {}
  detail::SocketRef s_;
};

// host_port: "127.0.0.1:8080", "[::1]:0", "localhost:80" (getaddrinfo). Port 0 picks a
// free port. Sets SO_REUSEADDR. Throws std::invalid_argument for a malformed address,
// std::system_error when the socket cannot be bound or listened on.
Listener listen(std::string_view host_port, const ListenOptions& o);
inline Listener listen(std::string_view host_port) {
  return listen(host_port, ListenOptions{});
}

// Connects to host_port. Throws timeout_error when `timeout` passes first (timeout <= 0:
// no timeout of its own), std::system_error (ECONNREFUSED, ...) when the connection
// fails, std::invalid_argument for a malformed address. A name resolving to several
// addresses tries them in order.
Conn dial(std::string_view host_port, Duration timeout = Duration::zero());

}  // namespace corun::net
