// tests/net/scale_test.cpp — the network at scale and at the descriptor limit.
//
//  - 10000 concurrent loopback connections (all open at once, behind a barrier), each
//    echoing a few KiB of random data checked by length and checksum; the server closes
//    first (so TIME_WAIT stays on the server's side, not on the client's ephemeral ports,
//    across the repeated runs at several P counts), and the client reads EOF.
//    Descriptors: the soft RLIMIT_NOFILE is raised to the hard limit. When one process
//    cannot hold both ends (2 x 10000 fds), the clients run in a child process (this
//    binary re-executed, tests/support.hpp child_run) with a runtime of its own; only
//    when even one end does not fit is the count scaled down, with a MESSAGE.
//  - EMFILE (in a child: it lowers RLIMIT_NOFILE): the descriptor table is filled, a
//    connection is made to wait in the listener's queue, and the server's accept finds
//    no descriptor for it. Accept must back off without spinning (CPU time over 300 ms of
//    waiting well below the wall time: < 50%), not return, and once descriptors are freed
//    accept the connection within its back-off (bounded by kHang) and serve it.
//
// Invariants the tests keep: every operation has a deadline (hang bound only); all tasks
// are waited for; failures are recorded by tasks and checked after run(); sizes shrink by
// kScale under the sanitizers and live tasks stay under live_cap; no fd is left open.
#include <doctest/doctest.h>

#include <corun/corun.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "net/net_support.hpp"

using namespace corun::test::nt;
namespace net = corun::net;
namespace t = corun::test;

namespace {

constexpr int kTargetConns = 10000;
// A hang bound for one connection's whole exchange at full scale.
constexpr Duration kConnBound = std::chrono::seconds(kSan ? 300 : 120);

// Raises the soft descriptor limit to the hard one; returns the soft limit now in force.
rlim_t raise_nofile() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit want = rl;
    want.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
  }
  return rl.rlim_cur;
}

// Server side: accepts `n` conns; each handler reads a 4-byte length L, echoes L bytes
// back as they come, then closes (the server closes first).
void serve(Failures& f, net::Listener& ln, int n, std::atomic<int>& served) {
  corun::WaitGroup hw;
  for (int i = 0; i < n; i++) {
    net::Conn c;
    Outcome a = attempt([&] { c = ln.accept(); });
    if (!a.is_ok()) {  // closed early because a client failed (recorded there)
      f.expect(a.is_errno(EBADF), "accept: " + a.str());
      break;
    }
    go_safe(f, hw, "handler", [&f, &served, c = std::move(c)]() mutable {
      c.set_deadline(Clock::now() + kConnBound);
      std::string h = read_n(c, 4);
      if (!f.expect(h.size() == 4, "server: short header")) return;
      std::uint32_t len = 0;
      for (int k = 0; k < 4; k++) len |= static_cast<std::uint32_t>(std::uint8_t(h[k])) << (8 * k);
      std::vector<std::byte> buf(4096);
      std::uint32_t done = 0;
      while (done < len) {
        std::size_t want = std::min<std::size_t>(buf.size(), len - done);
        std::size_t k = c.read(std::span<std::byte>(buf.data(), want));
        if (!f.expect(k > 0,
                      "server: EOF after " + std::to_string(done) + " of " + std::to_string(len)))
          return;
        c.write(std::span<const std::byte>(buf.data(), k));
        done += static_cast<std::uint32_t>(k);
      }
      served++;
    });  // c closes here: the client reads EOF after the echo
  }
  hw.wait();
}

// Client side: n tasks dial addr (at most kDialing at a time, so the accept queue does not
// overflow into SYN retransmissions), wait until all n are connected, then each writes
// a length and 4..16 KiB of random bytes in random chunks, reads the echo, checks length
// and checksum, and expects EOF.
void clients(Failures& f, const std::string& addr, int n, std::atomic<int>& ok) {
  constexpr int kDialing = 256;
  corun::Chan<char> dial_slots(kDialing);
  corun::Chan<char> all_in;  // closed when every client has connected (or failed)
  std::atomic<int> arrived{0}, connected{0};
  auto arrive = [&] {
    if (arrived.fetch_add(1) + 1 == n) all_in.close();
  };
  const std::uint64_t seed = static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
  corun::WaitGroup cw;
  for (int i = 0; i < n; i++) {
    go_safe(f, cw, "client", [&, i] {
      dial_slots.send(0);
      net::Conn c;
      Outcome d = attempt([&] { c = net::dial(addr, kHang); });
      dial_slots.recv();
      if (d.is_ok()) connected++;
      arrive();
      all_in.recv();  // the barrier: every conn is open now
      if (!f.expect(d.is_ok(), "dial #" + std::to_string(i) + ": " + d.str())) return;
      c.set_deadline(Clock::now() + kConnBound);
      std::mt19937_64 rng(seed + static_cast<std::uint64_t>(i));
      const std::uint32_t len = 4096 + static_cast<std::uint32_t>(rng() % 12289);
      std::string hdr(4, '\0');
      for (int k = 0; k < 4; k++) hdr[k] = static_cast<char>((len >> (8 * k)) & 0xff);
      c.write(hdr);
      std::vector<std::byte> chunk(2048);
      std::uint64_t sum = fnv1a({});
      for (std::uint32_t sent = 0; sent < len;) {
        std::size_t k = std::min<std::size_t>(1 + rng() % chunk.size(), len - sent);
        for (std::size_t j = 0; j < k; j++) chunk[j] = static_cast<std::byte>(rng());
        std::span<const std::byte> part(chunk.data(), k);
        sum = fnv1a(part, sum);
        c.write(part);
        sent += static_cast<std::uint32_t>(k);
      }
      Drained back = read_to_eof(c);  // the echo, then the server's close
      f.expect(back.n == len, "client #" + std::to_string(i) + ": echo of " +
                                  std::to_string(back.n) + " bytes, sent " + std::to_string(len));
      f.expect(back.sum == sum, "client #" + std::to_string(i) + ": checksum differs");
      if (back.n == len && back.sum == sum) ok++;
    });
  }
  cw.wait();
  f.expect(connected.load() == n,
           "connected " + std::to_string(connected.load()) + " of " + std::to_string(n));
}

int env_int(const char* name) {
  const char* s = std::getenv(name);
  return s ? std::atoi(s) : 0;
}

}  // namespace

TEST_SUITE("rt.net.scale") {
  TEST_CASE("10000 concurrent loopback conns echo checksummed data") {
    const rlim_t limit = raise_nofile();
    // 2 tasks per conn (client, handler) must stay under TSan's live task cap.
    const int n_want = std::min(kTargetConns / t::kScale, t::kMaxLive / 2 - 10);
    const int base = count_fds() + 64;  // this process's own, plus slack for the runtime
    const int room = static_cast<int>(limit) - base;
    int n = n_want;
    bool split = false;  // clients in a child process
    if (2 * n > room) {
      split = true;
      if (n > room) {
        n = room;
        MESSAGE("RLIMIT_NOFILE " << limit << " (hard): scaled down to " << n
                                 << " conns (each process holds one end)");
      }
    }
    if (n_want != kTargetConns)
      MESSAGE("conns: " << n << " (" << kTargetConns << " shrunk for sanitizers/live_cap)");
    if (split)
      MESSAGE("RLIMIT_NOFILE " << limit << ": one process cannot hold both ends of " << n
                               << " conns; the clients run in a child process");
    std::atomic<int> served{0}, ok{0};
    auto t0 = Clock::now();
    nrun("scale", [&](Failures& f) {
      net::Listener ln = net::listen("127.0.0.1:0");
      const std::string addr = hostport("127.0.0.1", ln.port());
      corun::WaitGroup sw;
      go_safe(f, sw, "server", [&] { serve(f, ln, n, served); });
      if (!split) {
        clients(f, addr, n, ok);
      } else {
        t::ChildResult r = corun::blocking([&] {
          return t::child_run("net_scale_clients", {"NETTEST_SCALE_ADDR=" + addr,
                                                    "NETTEST_SCALE_N=" + std::to_string(n)});
        });
        f.expect(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0,
                 "client process status " + std::to_string(r.status) + ": " + r.output);
        if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) ok = n;
      }
      ln.close();  // the server took all n unless a client failed (recorded)
      sw.wait();
    });
    MESSAGE(n << " conns in " << secs(Clock::now() - t0) << " s"
              << std::string(split ? " (2 processes)" : ""));
    CHECK(served.load() == n);
    CHECK(ok.load() == n);
  }

  TEST_CASE("EMFILE: accept backs off without spinning, then resumes and serves (child)") {
    t::ChildResult r = t::child_run("net_emfile");
    CHECK_MESSAGE((WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0), "child status " << r.status
                                                                                       << ":\n"
                                                                                       << r.output);
    if (!r.output.empty()) MESSAGE(r.output);
  }
}

// ---- child scenarios ----------------------------------------------------------------

CORUN_TEST_CHILD(net_scale_clients) {
  alarm(std::chrono::duration_cast<std::chrono::seconds>(kConnBound).count() + 60);
  raise_nofile();
  const char* addr = std::getenv("NETTEST_SCALE_ADDR");
  const int n = env_int("NETTEST_SCALE_N");
  if (!addr || n <= 0) return 2;
  Failures f;
  std::atomic<int> ok{0};
  t::run([&] {
    Outcome o = attempt([&] { clients(f, addr, n, ok); });
    if (!o.is_ok()) f.add("clients: uncaught " + o.str());
  });
  if (f.count() || ok.load() != n) {
    std::fprintf(stderr, "net_scale_clients: %d of %d ok; %s\n", ok.load(), n, f.report().c_str());
    return 1;
  }
  return 0;
}

CORUN_TEST_CHILD(net_emfile) {
  alarm(120);
  Failures f;
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, static_cast<rlim_t>(count_fds() + 64));
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    std::fprintf(stderr, "net_emfile: setrlimit failed\n");
    return 1;
  }
  double cpu_share = -1;
  t::run([&] {
    std::vector<int> filler;
    auto fill = [&] {
      for (;;) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
          f.expect(errno == EMFILE, std::string("filling: ") + std::strerror(errno));
          return;
        }
        filler.push_back(fd);
      }
    };
    auto release = [&](std::size_t k) {
      for (; k > 0 && !filler.empty(); k--) {
        close(filler.back());
        filler.pop_back();
      }
    };
    Outcome top = attempt([&] {
      net::Listener ln = net::listen("127.0.0.1:0");
      const std::string addr = hostport("127.0.0.1", ln.port());
      {  // Warm up the paths used below while descriptors are free: UBSan's vptr check
         // needs a pipe to inspect an object it has not seen yet, and reports a false
         // "invalid vptr" when the table is full.
        net::Conn a = net::dial(addr, kHang);
        net::Conn b = ln.accept();
        a.set_read_deadline(Clock::now() + 1ms);
        std::byte x[1];
        attempt([&] { return a.read(x); });
        corun::sleep(1ms);
      }
      fill();
      // Free one descriptor at a time until a dial gets through (it needs its own), then
      // fill again: the connection waits in the listener's queue, no descriptor left.
      net::Conn c;
      for (;;) {
        if (!f.expect(!filler.empty(), "no dial succeeded with every descriptor free")) return;
        release(1);
        Outcome d = attempt([&] { c = net::dial(addr, kHang); });
        if (d.is_ok()) break;
        if (!f.expect(d.is_errno(EMFILE), "dial while filling: " + d.str())) return;
      }
      fill();
      std::atomic<bool> accepted{false};
      corun::WaitGroup wg;
      Join join(wg, [&] {
        ln.close();
        c.close();
      });
      go_safe(f, wg, "server", [&] {
        net::Conn s;
        Outcome a = attempt([&] { s = ln.accept(); });
        if (!f.expect(a.is_ok(), "accept: " + a.str())) return;
        accepted = true;
        s.set_deadline(Clock::now() + kHang);
        std::string got = read_n(s, 4);
        s.write(got);
      });
      corun::sleep(20ms);  // the server task is in accept, finding EMFILE
      rusage r0{}, r1{};
      getrusage(RUSAGE_SELF, &r0);
      auto w0 = Clock::now();
      corun::sleep(300ms);
      getrusage(RUSAGE_SELF, &r1);
      double wall = secs(Clock::now() - w0);
      auto tv = [](const timeval& x) { return double(x.tv_sec) + double(x.tv_usec) * 1e-6; };
      double cpu = tv(r1.ru_utime) - tv(r0.ru_utime) + tv(r1.ru_stime) - tv(r0.ru_stime);
      cpu_share = cpu / wall;
      f.expect(cpu_share < 0.5, "CPU " + std::to_string(cpu) + " s over " + std::to_string(wall) +
                                    " s of waiting: accept spins");
      f.expect(!accepted.load(), "accept returned with no descriptor free (fill failed?)");
      // Free descriptors: accept resumes within its back-off and serves.
      release(8);
      bool resumed = wait_until([&] { return accepted.load(); });
      f.expect(resumed, "accept did not resume after descriptors were freed");
      if (resumed) {
        c.set_deadline(Clock::now() + kHang);
        c.write("ping");
        std::string echo = read_n(c, 4);
        f.expect(echo == "ping", "echo \"" + echo + "\"");
        // A new connection is accepted too, now that descriptors are back.
        net::Conn c2;
        Outcome d2 = attempt([&] { c2 = net::dial(addr, kHang); });
        f.expect(d2.is_ok(), "second dial: " + d2.str());
        if (d2.is_ok()) {
          Outcome a2 = attempt([&] { ln.accept(); });  // queued already: returns at once
          f.expect(a2.is_ok(), "second accept: " + a2.str());
        }
      }
      ln.close();  // ends a stuck accept (EBADF, recorded) instead of hanging
      wg.wait();
    });
    if (!top.is_ok()) f.add("uncaught: " + top.str());
    release(filler.size());
  });
  std::fprintf(stderr, "net_emfile: CPU share while accept was out of descriptors: %.3f\n",
               cpu_share);
  if (f.count()) {
    std::fprintf(stderr, "net_emfile: %s\n", f.report().c_str());
    return 1;
  }
  return 0;
}
