// perf/bench_net.cpp — network benchmarks over loopback: what a read deadline per read
// costs (the many-deadlines pattern of an HTTP server, Go CL 34784's motivation) and how
// late a read deadline fires, beside TimerLateness/Sleep1.
//
// NetEcho/<deadline|nodeadline>: one server task and the main task as client over one
// loopback TCP connection (127.0.0.1, TCP_NODELAY as accept and dial set it); op = one
// round trip of a message of 1..64 bytes (size i % 64 + 1 for the i-th op, mean 32.5; the
// first byte carries the size): the client writes it and reads the echo back; the
// server reads one message (the client never has two in flight) and writes it back.
// /deadline: the server sets a read deadline of now+5s before every read, as go-raw and
// net/http do per request; /nodeadline: it never sets one. Their difference is the cost
// of one deadline reset per read (one timer reset in the heap of the setter's P). The
// listener, the connection and one warm-up round trip are outside the timed region.
// Metrics: ns/op, cpu%.
//
// TimerLateness/ReadDeadline=<d>/<load>: one task, one connected socket that never gets
// data; each of b.n samples is set_read_deadline(t0 + d) then read(), which must throw
// timeout_error; lateness = the clock after the throw minus (t0 + d), t0 the clock read
// just before the set. The shape (one waiter, back-to-back waits of d = 1us, 50us, 1ms,
// load idle or busy) is TimerLateness/Sleep1's, with the busy load and percentiles of
// perf/lateness.hpp, so the two rows print side by side: ReadDeadline minus Sleep1 is what
// the poller path (the deadline timer waking a task parked on a socket) adds to a plain
// timer wake. op = one such wait; p50-ns, p99-ns, max-ns, cpu%.
//
// Go twins (same names, ops and metrics): scripts/gobench/net_test.go.
// Rejected: Go's BenchmarkTCP4Persistent shape (many concurrent conns, 512-byte messages):
// it measures the kernel's loopback more than the poller; one pair isolates the
// park/ready path and the deadline. A fixed message size: every size fits one segment
// here, and a cycling size keeps the server's read loop honest (it must not assume one
// read per message). Lateness measured from inside the runtime: the public API is what
// users see, and the same code runs under CORUN_TIMERS=global and per-p.
#include <corun/net.hpp>
#include <corun/runtime.hpp>
#include <corun/sync.hpp>
#include <corun/time.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench.hpp"
#include "lateness.hpp"

namespace {

using namespace std::chrono_literals;
using corun::Clock;
using corun::Duration;
using corun::bench::B;
using corun::bench::BusyLoad;
using corun::bench::Load;
using corun::bench::ns;
using corun::bench::report_lateness;
namespace net = corun::net;

constexpr std::size_t kMaxMessage = 64;
constexpr Duration kServerDeadline = 5s;  // go-raw's and net/http's per-request deadline

using Buffer = std::array<std::byte, kMaxMessage>;

// Reads one message (its size in its first byte) into buf; returns its size, 0 at EOF.
// deadline: set a read deadline of now + kServerDeadline before every read.
std::size_t read_message(net::Conn& c, Buffer& buf, bool deadline) {
  std::size_t got = 0;
  std::size_t want = 1;
  while (got < want) {
    if (deadline) c.set_read_deadline(Clock::now() + kServerDeadline);
    const std::size_t r = c.read(std::span<std::byte>(buf).subspan(got, kMaxMessage - got));
    if (r == 0) {
      if (got == 0) return 0;
      throw std::runtime_error("NetEcho: EOF inside a message");
    }
    if (got == 0) want = static_cast<std::size_t>(buf[0]);
    got += r;
  }
  if (got != want) throw std::runtime_error("NetEcho: two messages in flight");
  return want;
}

// The client's side of one op: write a message of `size` bytes, read the echo back.
void round_trip(net::Conn& c, Buffer& buf, std::size_t size) {
  buf[0] = static_cast<std::byte>(size);
  c.write(std::span<const std::byte>(buf.data(), size));
  if (read_message(c, buf, false) != size) throw std::runtime_error("NetEcho: short echo");
}

void net_echo(B& b, bool deadline) {
  b.stop_timer();
  net::Listener ln = net::listen("127.0.0.1:0");
  std::exception_ptr server_error;  // written by the server task, read after done.wait()
  corun::WaitGroup done;
  done.add(1);
  corun::go([&ln, &server_error, &done, deadline] {
    try {
      net::Conn c = ln.accept();
      Buffer buf{};
      while (const std::size_t n = read_message(c, buf, deadline))
        c.write(std::span<const std::byte>(buf.data(), n));
    } catch (...) {
      server_error = std::current_exception();
    }
    done.done();
  });
  {
    net::Conn c = net::dial(ln.addr());
    Buffer buf{};
    for (std::size_t i = 0; i < kMaxMessage; ++i) buf[i] = static_cast<std::byte>(i);
    round_trip(c, buf, 1);  // warm-up: both tasks have run once, the conn is established
    b.reset_timer();
    b.start_timer();
    for (std::int64_t i = 0; i < b.n; ++i)
      round_trip(c, buf, static_cast<std::size_t>(i) % kMaxMessage + 1);
    b.stop_timer();
  }  // closes: the server reads EOF
  done.wait();
  if (server_error) std::rethrow_exception(server_error);
  b.report_cpu();
}

// A connected loopback pair whose `quiet` end never receives data.
struct QuietPair {
  net::Conn quiet;
  net::Conn other;
};

QuietPair quiet_pair() {
  net::Listener ln = net::listen("127.0.0.1:0");
  QuietPair p;
  p.other = net::dial(ln.addr());
  p.quiet = ln.accept();
  return p;
}

void read_deadline_lateness(B& b, Duration d, Load load) {
  b.stop_timer();
  const auto n = static_cast<std::size_t>(b.n);
  std::vector<std::vector<std::int64_t>> samples(1, std::vector<std::int64_t>(n));
  QuietPair pair = quiet_pair();
  std::optional<BusyLoad> busy;
  if (load == Load::busy) busy.emplace(b.procs());
  std::exception_ptr error;  // written by the task, read after done.wait()
  corun::WaitGroup done;
  done.add(1);
  b.reset_timer();
  b.start_timer();
  corun::go([&done, &error, &pair, d, n, out = samples[0].data()] {
    try {
      Buffer buf{};
      for (std::size_t i = 0; i < n; ++i) {
        const auto deadline = Clock::now() + d;
        pair.quiet.set_read_deadline(deadline);
        try {
          pair.quiet.read(buf);
          throw std::runtime_error("ReadDeadline: read returned instead of timing out");
        } catch (const net::timeout_error&) {
          out[i] = ns(Clock::now() - deadline);
        }
      }
    } catch (...) {
      error = std::current_exception();
    }
    done.done();
  });
  done.wait();
  b.stop_timer();
  busy.reset();
  if (error) std::rethrow_exception(error);
  report_lateness(b, samples, "read deadline");
  b.report_cpu();
}

const bool registered = [] {
  corun::bench::register_benchmark("NetEcho/deadline", [](B& b) { net_echo(b, true); });
  corun::bench::register_benchmark("NetEcho/nodeadline", [](B& b) { net_echo(b, false); });
  struct Wait {
    const char* name;
    Duration d;
  };
  // TimerLateness/Sleep1's waits and loads (bench_time.cpp), so the rows pair up.
  const Wait waits[] = {{"1us", 1us}, {"50us", 50us}, {"1ms", 1ms}};
  const std::pair<const char*, Load> loads[] = {{"idle", Load::idle}, {"busy", Load::busy}};
  for (const Wait& w : waits) {
    for (const auto& [load_name, load] : loads) {
      corun::bench::register_benchmark(
          std::string("TimerLateness/ReadDeadline=") + w.name + "/" + load_name,
          [d = w.d, load = load](B& b) { read_deadline_lateness(b, d, load); });
    }
  }
  return true;
}();

}  // namespace
