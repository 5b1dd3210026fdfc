// tests/net/net_support.hpp — helpers shared by the net suites (net_test.cpp,
// deadline_test.cpp, scale_test.cpp): a watchdog, an fd-leak check around each runtime,
// exception classification, failure recording for helper tasks, and small I/O helpers.
//
// Invariants the helpers keep:
//  - Nothing throws out of a task: nrun() wraps the main task and go_safe() wraps helper
//    tasks, turning an escaping exception into a recorded failure (an exception escaping
//    a task aborts the process). Where the main task may throw while helpers run, a Join
//    closes what they block on and waits for them, so a failure is reported, not a crash.
//  - Helper tasks never use doctest asserts; they record into a Failures object that the
//    test checks after run() returned.
//  - nrun() compares the count of open descriptors (/proc/self/fd) before and after the
//    runtime ran, after one warm-up run, so every test also checks it closed what it
//    opened (the runtime's own poller descriptor included).
//  - Upper time bounds only catch hangs (kHang per operation, kWatchdog per test).
#pragma once

#include <doctest/doctest.h>

#include <corun/corun.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "support.hpp"

namespace corun::test::nt {

using namespace std::chrono_literals;
using corun::Clock;
using corun::Duration;
using TimePoint = Clock::time_point;
using corun::test::Watchdog;

inline constexpr bool kSan = CORUN_ASAN || CORUN_TSAN;
// One network operation on loopback taking longer than this is a hang.
inline constexpr Duration kHang = std::chrono::seconds(kSan ? 30 : 10);
// A whole test still running after this is hung: the watchdog aborts naming it.
inline constexpr auto kWatchdog = std::chrono::seconds(kSan ? 400 : 150);

inline double secs(Duration d) {
  return std::chrono::duration<double>(d).count();
}

// Failures recorded by tasks (thread-safe); checked by the test after run() returned.
class Failures {
 public:
  void add(std::string msg) {
    n_.fetch_add(1);
    std::lock_guard<std::mutex> lk(mu_);
    if (msgs_.size() < 20) msgs_.push_back(std::move(msg));
  }
  // Records msg when cond is false; returns cond.
  bool expect(bool cond, const std::string& msg) {
    if (!cond) add(msg);
    return cond;
  }
  int count() const { return n_.load(); }
  std::string report() const {
    std::lock_guard<std::mutex> lk(mu_);
    std::string s = std::to_string(n_.load()) + " failure(s)";
    for (auto& m : msgs_) s += "\n  " + m;
    return s;
  }

 private:
  std::atomic<int> n_{0};
  mutable std::mutex mu_;
  std::vector<std::string> msgs_;  // guarded by mu_; the first 20
};

// What a call did: returned (n), or threw one of the exception kinds the contract names.
struct Outcome {
  enum Kind { ok, timeout, sys, inval, logic, other };
  Kind kind = ok;
  int code = 0;       // errno for sys
  std::size_t n = 0;  // return value for ok (0 for void calls)
  std::string what;

  bool is_ok() const { return kind == ok; }
  bool is_timeout() const { return kind == timeout; }
  bool is_errno(int e) const { return kind == sys && code == e; }
  std::string str() const {
    switch (kind) {
      case ok:
        return "returned " + std::to_string(n);
      case timeout:
        return "timeout_error(" + what + ")";
      case sys:
        return "system_error(errno " + std::to_string(code) + " " + std::strerror(code) + ": " +
               what + ")";
      case inval:
        return "invalid_argument(" + what + ")";
      case logic:
        return "logic_error(" + what + ")";
      case other:
        return "other exception(" + what + ")";
    }
    return "?";
  }
};

template <class F>
Outcome attempt(F&& f) {
  Outcome o;
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
    } else {
      o.n = static_cast<std::size_t>(f());
    }
  } catch (const corun::net::timeout_error& e) {
    o.kind = Outcome::timeout;
    o.what = e.what();
  } catch (const std::system_error& e) {
    o.kind = Outcome::sys;
    o.code = e.code().value();
    o.what = e.what();
  } catch (const std::invalid_argument& e) {
    o.kind = Outcome::inval;
    o.what = e.what();
  } catch (const std::logic_error& e) {
    o.kind = Outcome::logic;
    o.what = e.what();
  } catch (const std::exception& e) {
    o.kind = Outcome::other;
    o.what = e.what();
  } catch (...) {
    o.kind = Outcome::other;
    o.what = "non-std exception";
  }
  return o;
}

// Spawns fn as a task that cannot throw out (an escaping exception is a failure), and that
// wg.done()s when it ends (wg.add(1) happens here).
template <class F>
void go_safe(Failures& f, corun::WaitGroup& wg, std::string what, F&& fn) {
  wg.add(1);
  corun::go([&f, &wg, what = std::move(what), fn = std::forward<F>(fn)]() mutable {
    Outcome o = attempt([&] { fn(); });
    if (!o.is_ok()) f.add(what + ": uncaught " + o.str());
    wg.done();
  });
}

// Waits for a WaitGroup's helper tasks when the scope ends, also when it ends by an
// exception (a failing call in the main task): then it first runs `unblock` (closing what
// the helpers may be blocked on), so helpers never outlive the stack they refer to.
// Declare it after the WaitGroup and the conns `unblock` closes.
class Join {
 public:
  explicit Join(corun::WaitGroup& wg, std::function<void()> unblock = {})
      : wg_(wg), unblock_(std::move(unblock)), exceptions_(std::uncaught_exceptions()) {}
  ~Join() {
    if (std::uncaught_exceptions() > exceptions_ && unblock_) unblock_();
    wg_.wait();
  }
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

 private:
  corun::WaitGroup& wg_;
  std::function<void()> unblock_;
  int exceptions_;
};

// Open descriptors of this process.
inline int count_fds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') n++;
    closedir(d);
    n--;  // the DIR's own descriptor
  }
  return n;
}

// Boots a runtime (procs() Ps unless n) under a watchdog and runs fn as its main task,
// catching what escapes it. Checks that fn recorded no failure and, if check_fds, that
// the runtime left no descriptor open.
inline void nrun(const std::string& what, const std::function<void(Failures&)>& fn,
                 bool check_fds = true, int n = 0) {
  static bool warmed = false;  // the first runtime to use the network may open lazily
  if (!warmed) {
    warmed = true;
    corun::test::run([] {
      try {
        corun::net::Listener ln = corun::net::listen("127.0.0.1:0");
        corun::net::Conn c = corun::net::dial("127.0.0.1:" + std::to_string(ln.port()), 5s);
        corun::net::Conn s = ln.accept();
      } catch (...) {
      }
    });
  }
  Failures f;
  int fds0 = count_fds();
  {
    Watchdog wd(what, kWatchdog);
    corun::test::run(
        [&] {
          Outcome o = attempt([&] { fn(f); });
          if (!o.is_ok()) f.add("main task: uncaught " + o.str());
        },
        n);
  }
  CHECK_MESSAGE(f.count() == 0, what << ": " << f.report());
  if (check_fds) {
    int fds1 = count_fds();
    CHECK_MESSAGE(fds1 == fds0, what << ": open descriptors before " << fds0 << ", after " << fds1
                                     << " (a leak)");
  }
}

// ---- bytes --------------------------------------------------------------------------

inline std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}
inline std::span<std::byte> as_wbytes(std::string& s) {
  return std::as_writable_bytes(std::span<char>(s.data(), s.size()));
}

inline std::uint64_t fnv1a(std::span<const std::byte> b, std::uint64_t h = 1469598103934665603ull) {
  for (std::byte x : b) {
    h ^= static_cast<std::uint8_t>(x);
    h *= 1099511628211ull;
  }
  return h;
}

// A 32 MiB buffer, more than a loopback socket pair buffers when the peer does not read:
// one write of it blocks.
inline const std::vector<std::byte>& big_buffer() {
  static const std::vector<std::byte> b = [] {
    std::vector<std::byte> v(32u << 20);
    for (std::size_t i = 0; i < v.size(); i++) v[i] = static_cast<std::byte>('a' + i % 26);
    return v;
  }();
  return b;
}

// Reads exactly n bytes unless EOF comes first (throws what read throws).
inline std::string read_n(corun::net::Conn& c, std::size_t n) {
  std::string s(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    std::size_t k = c.read(as_wbytes(s).subspan(got));
    if (k == 0) break;
    got += k;
  }
  s.resize(got);
  return s;
}

// Reads until EOF; returns the count and checksum of the bytes (and up to keep of them).
struct Drained {
  std::size_t n = 0;
  std::uint64_t sum = 1469598103934665603ull;
  std::string head;
};
inline Drained read_to_eof(corun::net::Conn& c, std::size_t keep = 0) {
  Drained d;
  std::vector<std::byte> buf(64 << 10);
  for (;;) {
    std::size_t k = c.read(buf);
    if (k == 0) return d;
    d.sum = fnv1a(std::span<const std::byte>(buf.data(), k), d.sum);
    if (d.head.size() < keep)
      d.head.append(reinterpret_cast<const char*>(buf.data()), std::min(k, keep - d.head.size()));
    d.n += k;
  }
}

// Bytes queued for reading on the socket (FIONREAD), -1 on error.
inline int inq(const corun::net::Conn& c) {
  int n = 0;
  return ioctl(c.native_handle(), FIONREAD, &n) == 0 ? n : -1;
}
// Waits (sleeping in the task) until at least n bytes are queued for reading.
inline bool wait_inq(const corun::net::Conn& c, int n, Duration limit = kHang) {
  auto t0 = Clock::now();
  while (inq(c) < n) {
    if (Clock::now() - t0 > limit) return false;
    corun::sleep(1ms);
  }
  return true;
}

// Polls pred (sleeping 1 ms between) until it holds or limit passed.
template <class Pred>
bool wait_until(Pred pred, Duration limit = kHang) {
  auto t0 = Clock::now();
  while (!pred()) {
    if (Clock::now() - t0 > limit) return false;
    corun::sleep(1ms);
  }
  return true;
}

// ---- addresses and pairs ------------------------------------------------------------

// True if this host can bind [::1] (IPv6 loopback configured and enabled).
inline bool have_ipv6_loopback() {
  static const bool ok = [] {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    bool r = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    return r;
  }();
  return ok;
}

inline std::string hostport(const char* host, std::uint16_t port) {
  return std::string(host) + ":" + std::to_string(port);
}

// A listener and one connection to it, both ends. host: "127.0.0.1" or "[::1]".
struct Pair {
  corun::net::Listener ln;
  corun::net::Conn c;  // the dialer's end
  corun::net::Conn s;  // the accepted end
  std::string addr;    // "host:port" of the listener
};
inline Pair make_pair(const char* host = "127.0.0.1") {
  Pair p;
  p.ln = corun::net::listen(std::string(host) + ":0");
  p.addr = hostport(host, p.ln.port());
  p.c = corun::net::dial(p.addr, kHang);  // loopback: completes in the backlog, before accept
  p.s = p.ln.accept();
  return p;
}

}  // namespace corun::test::nt
