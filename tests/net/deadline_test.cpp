// tests/net/deadline_test.cpp — Conn deadlines against API.md "Net": the properties of Go's
// net/timeout_test.go (TestReadTimeout, TestWriteTimeout, TestReadTimeoutMustNotReturn,
// TestReadTimeoutFluctuation, TestWriteTimeoutFluctuation, TestVariousDeadlines,
// TestReadWriteProlongedTimeout, TestReadWriteDeadlineRace, TestConcurrentSetDeadline)
// ported as properties, plus what the contract adds: a deadline set, moved later, moved
// earlier or cleared while a task is blocked applies to that blocked call; read and write
// deadlines are independent (also while blocked); set_deadline sets both; extreme time
// points; and the server pattern (many conns, each moving its read deadline before every
// read).
//
// Invariants the tests keep:
//  - Lower bounds are exact: a call that times out never returns before its deadline by
//    Clock; the bound is computed from a Clock::now() read BEFORE the deadline was set.
//  - Upper bounds only catch hangs (kHang, seconds): no precision is asserted.
//  - A test whose claim depends on a helper task acting before a deadline (moving or
//    clearing it while the call is blocked) measures when the helper's call returned and,
//    if that was already past the original deadline (a slow, loaded machine), retries
//    with a doubled time unit instead of failing.
//  - A timed-out call transferred nothing: checked by what the peer reads next.
//  - Every task spawned is waited for; tasks record failures (net_support.hpp Failures),
//    no doctest assert runs in a helper task; each test checks it left no fd open.
//  - Sizes shrink by kScale under the sanitizers; live tasks stay under live_cap.
#include <doctest/doctest.h>

#include <corun/corun.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "net/net_support.hpp"

using namespace corun::test::nt;
namespace net = corun::net;
namespace t = corun::test;

namespace {

std::string ms(Duration d) {
  return std::to_string(std::chrono::duration<double, std::milli>(d).count()) + " ms";
}

// Checks "o is a timeout that came no earlier than deadline and within kHang of it".
void expect_timeout_at(Failures& f, const std::string& what, const Outcome& o, TimePoint deadline,
                       TimePoint t1) {
  f.expect(o.is_timeout(), what + ": got " + o.str() + ", want timeout_error");
  f.expect(t1 >= deadline, what + ": returned " + ms(deadline - t1) + " before the deadline");
  f.expect(t1 - deadline < kHang, what + ": returned " + ms(t1 - deadline) + " after it");
}

}  // namespace

TEST_SUITE("rt.net.deadline") {
  TEST_CASE("ReadTimeout: a past deadline fails at once even with data ready; then usable") {
    nrun("ReadTimeout", [](Failures& f) {
      Pair p = make_pair();
      const std::string msg = "READ TIMEOUT TEST";
      p.s.write(msg);
      f.expect(wait_inq(p.c, static_cast<int>(msg.size())), "data never arrived");
      char b[1];
      auto rb = std::as_writable_bytes(std::span<char>(b, 1));
      // Deadlines in the past, the deadline == now, and extreme past time points: every
      // read fails at once with timeout_error, repeatedly, without consuming data.
      for (TimePoint d : {Clock::now() - 5s, Clock::now(), TimePoint{} + 1ns, TimePoint::min()}) {
        p.c.set_read_deadline(d);
        for (int j = 0; j < 2; j++) {
          auto t0 = Clock::now();
          Outcome o = attempt([&] { return p.c.read(rb); });
          f.expect(o.is_timeout(), "read past deadline: got " + o.str());
          f.expect(Clock::now() - t0 < kHang, "read past deadline did not fail at once");
        }
      }
      f.expect(inq(p.c) == static_cast<int>(msg.size()),
               "a timed-out read consumed data: " + std::to_string(inq(p.c)) + " queued");
      // Move the deadline 50 ms ahead: the reads succeed while data lasts, then the next
      // read times out no earlier than the deadline (Go: {50ms, [nil, timeout]}).
      auto t0 = Clock::now();
      p.c.set_read_deadline(t0 + 50ms);
      std::string got;
      Outcome o;
      for (;;) {
        o = attempt([&] { return p.c.read(rb); });
        if (!o.is_ok() || o.n == 0) break;
        got.push_back(b[0]);
      }
      expect_timeout_at(f, "read after the data", o, t0 + 50ms, Clock::now());
      f.expect(got == msg, "read \"" + got + "\", want \"" + msg + "\"");
      // Cleared: a read blocks until data, and a far deadline (time_point::max()) is none.
      p.c.set_read_deadline(TimePoint{});
      p.s.write("x");
      o = attempt([&] { return p.c.read(rb); });
      f.expect(o.is_ok() && o.n == 1 && b[0] == 'x', "read after clearing: " + o.str());
      p.c.set_read_deadline(TimePoint::max());
      p.s.write("y");
      o = attempt([&] { return p.c.read(rb); });
      f.expect(o.is_ok() && o.n == 1 && b[0] == 'y', "read with max deadline: " + o.str());
    });
  }

  TEST_CASE("WriteTimeout: a past deadline fails at once and sends nothing; then usable") {
    nrun("WriteTimeout", [](Failures& f) {
      Pair p = make_pair();
      for (TimePoint d : {Clock::now() - 5s, Clock::now(), TimePoint{} + 1ns, TimePoint::min()}) {
        p.c.set_write_deadline(d);
        for (int j = 0; j < 2; j++) {
          auto t0 = Clock::now();
          Outcome o = attempt([&] { return p.c.write("WRITE TIMEOUT TEST"); });
          f.expect(o.is_timeout(), "write past deadline: got " + o.str());
          f.expect(Clock::now() - t0 < kHang, "write past deadline did not fail at once");
        }
      }
      p.c.set_write_deadline(Clock::now() + kHang);
      Outcome o = attempt([&] { return p.c.write("OK"); });
      f.expect(o.is_ok() && o.n == 2, "write after moving the deadline: " + o.str());
      p.s.set_read_deadline(Clock::now() + kHang);
      std::string got = read_n(p.s, 2);
      f.expect(got == "OK", "peer read \"" + got + "\": a timed-out write sent data");
      corun::sleep(20ms);
      f.expect(inq(p.s) == 0, "peer has " + std::to_string(inq(p.s)) + " more bytes queued");
    });
  }

  TEST_CASE("ReadTimeoutMustNotReturn: no read deadline, past write deadline; close wakes") {
    nrun("ReadTimeoutMustNotReturn", [](Failures& f) {
      Pair p = make_pair();
      std::atomic<bool> returned{false};
      Outcome ro;
      corun::WaitGroup wg;
      go_safe(f, wg, "reader", [&] {
        p.c.set_deadline(Clock::now() - 5s);
        p.c.set_write_deadline(Clock::now() - 5s);
        p.c.set_read_deadline(TimePoint{});
        char b[1];
        ro = attempt([&] { return p.c.read(std::as_writable_bytes(std::span<char>(b, 1))); });
        returned = true;
      });
      corun::sleep(100ms);
      f.expect(!returned.load(), "read returned while it should block: " + ro.str());
      p.c.close();
      wg.wait();
      f.expect(ro.is_errno(EBADF), "read after close: " + ro.str() + ", want EBADF");
    });
  }

  TEST_CASE("ReadTimeoutFluctuation: a blocked read times out, not before its deadline") {
    nrun("ReadTimeoutFluctuation", [](Failures& f) {
      Pair p = make_pair();
      std::vector<std::byte> b(256);
      for (Duration d :
           {Duration(1us), Duration(1ms), Duration(10ms), Duration(50ms), Duration(100ms)}) {
        auto t0 = Clock::now();
        p.c.set_read_deadline(t0 + d);
        Outcome o = attempt([&] { return p.c.read(b); });
        expect_timeout_at(f, "read, deadline +" + ms(d), o, t0 + d, Clock::now());
      }
      // Still usable after the timeouts.
      p.c.set_read_deadline(Clock::now() + kHang);
      p.s.write("z");
      Outcome o = attempt([&] { return p.c.read(b); });
      f.expect(o.is_ok() && o.n == 1, "read after timeouts: " + o.str());
    });
  }

  TEST_CASE("WriteTimeoutFluctuation: writes to a peer not reading time out; bytes in order") {
    nrun("WriteTimeoutFluctuation", [](Failures& f) {
      Pair p = make_pair();
      const auto& big = big_buffer();
      std::vector<std::byte> chunk(big.begin(), big.begin() + (1 << 20));
      std::uint64_t sent_max = 0;  // bytes of whole writes that returned, plus 1 MiB each
      for (Duration d : {Duration(10ms), Duration(50ms), Duration(100ms)}) {
        auto t0 = Clock::now();
        p.c.set_write_deadline(t0 + d);
        Outcome o;
        for (;;) {  // as Go: write until the deadline passes (the buffers fill first)
          o = attempt([&] { return p.c.write(chunk); });
          if (!o.is_ok()) break;
          f.expect(o.n == chunk.size(), "write returned " + std::to_string(o.n));
          sent_max += chunk.size();
        }
        sent_max += chunk.size();  // the timed-out write may have sent a prefix
        expect_timeout_at(f, "write, deadline +" + ms(d), o, t0 + d, Clock::now());
        if (f.count()) return;
      }
      // Usable after the timeouts: a marker arrives after the pattern bytes, in order.
      p.c.set_write_deadline(TimePoint{});
      corun::WaitGroup wg;
      Join join(wg, [&] {
        p.c.close();
        p.s.close();
      });
      Outcome wo;
      go_safe(f, wg, "marker writer", [&] {
        wo = attempt([&] { return p.c.write("#END"); });
        p.c.close_write();
      });
      p.s.set_read_deadline(Clock::now() + kHang);
      // Each write restarts the pattern and a timed-out one sent an unknown prefix, so what
      // holds is: only pattern letters, then the marker, intact, then EOF.
      std::vector<std::byte> buf(64 << 10);
      std::uint64_t n = 0;
      std::string tail;
      bool in_order = true;
      for (;;) {
        std::size_t k = p.s.read(buf);
        if (k == 0) break;
        for (std::size_t i = 0; i < k; i++) {
          char ch = static_cast<char>(buf[i]);
          if (!tail.empty() || ch == '#') {
            tail.push_back(ch);
          } else {
            n++;
            if (ch < 'a' || ch > 'z') in_order = false;
          }
        }
      }
      wg.wait();
      f.expect(wo.is_ok() && wo.n == 4, "marker write: " + wo.str());
      f.expect(in_order, "a byte before the marker is not a pattern letter");
      f.expect(tail == "#END", "tail \"" + tail + "\", want \"#END\"");
      f.expect(n <= sent_max, "peer read " + std::to_string(n) + " pattern bytes, more than " +
                                  std::to_string(sent_max) + " written");
    });
  }

  TEST_CASE("VariousDeadlines: set_deadline + read-to-EOF loop times out for 1ns..250ms") {
    nrun("VariousDeadlines", [](Failures& f) {
      net::Listener ln = net::listen("127.0.0.1:0");
      const std::string addr = hostport("127.0.0.1", ln.port());
      corun::WaitGroup wg;
      Join join(wg, [&] { ln.close(); });
      go_safe(f, wg, "server", [&] {
        corun::WaitGroup hw;
        for (;;) {
          Outcome o;
          net::Conn c;
          o = attempt([&] { c = ln.accept(); });
          if (!o.is_ok()) {
            f.expect(o.is_errno(EBADF), "accept: " + o.str());
            break;
          }
          go_safe(f, hw, "handler", [c = std::move(c)]() mutable {
            std::byte b[1];
            c.set_read_deadline(Clock::now() + kHang);
            attempt([&] { return c.read(b); });  // waits for the client to close
          });
        }
        hw.wait();
      });
      for (Duration d :
           {Duration(1ns), Duration(2ns), Duration(5ns), Duration(50ns), Duration(100ns),
            Duration(200ns), Duration(500ns), Duration(750ns), Duration(1us), Duration(5us),
            Duration(25us), Duration(250us), Duration(500us), Duration(1ms), Duration(5ms),
            Duration(100ms), Duration(250ms)}) {
        const int runs = d >= 100ms ? 1 : 3;
        for (int r = 0; r < runs; r++) {
          net::Conn c = net::dial(addr, kHang);
          auto t0 = Clock::now();
          c.set_deadline(t0 + d);
          std::vector<std::byte> b(4096);
          Outcome o;
          do o = attempt([&] { return c.read(b); });
          while (o.is_ok() && o.n > 0);
          expect_timeout_at(f, "copy, deadline +" + ms(d), o, t0 + d, Clock::now());
        }
      }
      ln.close();
      wg.wait();
    });
  }

  TEST_CASE("VariousDeadlines concurrently: 100 tasks, each its conn and deadline") {
    nrun("VariousDeadlines concurrent", [](Failures& f) {
      net::Listener ln = net::listen("127.0.0.1:0");
      const std::string addr = hostport("127.0.0.1", ln.port());
      const int n = t::live_cap(100);
      std::vector<net::Conn> accepted;
      corun::WaitGroup wg;
      go_safe(f, wg, "acceptor", [&] {
        for (int i = 0; i < n; i++) accepted.push_back(ln.accept());
      });
      std::mt19937 rng(static_cast<unsigned>(Clock::now().time_since_epoch().count()));
      corun::WaitGroup cw;
      for (int i = 0; i < n; i++) {
        Duration d = std::chrono::microseconds(rng() % 20000);
        go_safe(f, cw, "client", [&f, &addr, d] {
          net::Conn c = net::dial(addr, kHang);
          std::vector<std::byte> b(512);
          auto t0 = Clock::now();
          c.set_deadline(t0 + d);
          Outcome o = attempt([&] { return c.read(b); });
          expect_timeout_at(f, "read, deadline +" + ms(d), o, t0 + d, Clock::now());
        });
      }
      cw.wait();
      ln.close();  // the acceptor is done unless a client failed (then: EBADF, recorded)
      wg.wait();
    });
  }

  TEST_CASE("A deadline moved later while a read is blocked extends that read") {
    nrun("deadline moved later", [](Failures& f) {
      bool decided = false;
      for (Duration unit : {Duration(100ms), Duration(200ms), Duration(400ms), Duration(800ms)}) {
        Pair p = make_pair();
        auto t0 = Clock::now();
        p.c.set_read_deadline(t0 + unit);
        TimePoint moved{};
        corun::WaitGroup wg;
        go_safe(f, wg, "mover", [&] {
          corun::sleep(unit / 10);
          p.c.set_read_deadline(t0 + 3 * unit);
          moved = Clock::now();
        });
        std::byte b[1];
        Outcome o = attempt([&] { return p.c.read(b); });
        auto t1 = Clock::now();
        wg.wait();
        if (moved >= t0 + unit) {  // the mover came too late to prove anything
          MESSAGE("moved later: mover late at unit " << ms(unit) << ", retrying");
          continue;
        }
        expect_timeout_at(f, "read with the deadline moved later", o, t0 + 3 * unit, t1);
        decided = true;
        break;
      }
      f.expect(decided, "the mover never acted before the first deadline (4 tries)");
    });
  }

  TEST_CASE("A deadline moved earlier (or into the past) while blocked ends that call") {
    nrun("deadline moved earlier", [](Failures& f) {
      // Read: from no deadline, and from a far one, to +30 ms and to the past.
      for (TimePoint first : {TimePoint{}, Clock::now() + 1h}) {
        for (Duration to : {Duration(30ms), Duration(-1s)}) {
          Pair p = make_pair();
          p.c.set_read_deadline(first);
          TimePoint target{};
          corun::WaitGroup wg;
          go_safe(f, wg, "mover", [&] {
            corun::sleep(20ms);
            target = Clock::now() + to;
            p.c.set_read_deadline(target);
          });
          std::byte b[1];
          Outcome o = attempt([&] { return p.c.read(b); });
          auto t1 = Clock::now();
          wg.wait();
          expect_timeout_at(f, "read with the deadline moved to " + ms(to), o, target, t1);
        }
      }
      // Write, blocked on a peer that does not read.
      for (Duration to : {Duration(30ms), Duration(-1s)}) {
        Pair p = make_pair();
        TimePoint target{};
        corun::WaitGroup wg;
        go_safe(f, wg, "mover", [&] {
          corun::sleep(20ms);
          target = Clock::now() + to;
          p.c.set_write_deadline(target);
        });
        Outcome o = attempt([&] { return p.c.write(big_buffer()); });
        auto t1 = Clock::now();
        wg.wait();
        expect_timeout_at(f, "write with the deadline moved to " + ms(to), o, target, t1);
      }
    });
  }

  TEST_CASE("A deadline cleared while a read is blocked: it waits for the data") {
    nrun("deadline cleared", [](Failures& f) {
      bool decided = false;
      for (Duration unit : {Duration(100ms), Duration(200ms), Duration(400ms), Duration(800ms)}) {
        Pair p = make_pair();
        auto t0 = Clock::now();
        p.c.set_read_deadline(t0 + unit);
        TimePoint cleared{}, written{};
        corun::WaitGroup wg;
        go_safe(f, wg, "clearer", [&] {
          corun::sleep(unit / 10);
          p.c.set_read_deadline(TimePoint{});
          cleared = Clock::now();
          corun::sleep(t0 + 2 * unit - Clock::now());
          written = Clock::now();
          p.s.write("x");
        });
        char b[1] = {0};
        Outcome o =
            attempt([&] { return p.c.read(std::as_writable_bytes(std::span<char>(b, 1))); });
        auto t1 = Clock::now();
        wg.wait();
        if (cleared >= t0 + unit) {
          MESSAGE("cleared: clearer late at unit " << ms(unit) << ", retrying");
          continue;
        }
        f.expect(o.is_ok() && o.n == 1 && b[0] == 'x',
                 "read after its deadline was cleared: " + o.str() + ", want the byte");
        f.expect(t1 >= written, "read returned before the data was written");
        decided = true;
        break;
      }
      f.expect(decided, "the clearer never acted before the deadline (4 tries)");
    });
  }

  TEST_CASE("Read and write deadlines are independent, also while blocked") {
    nrun("independent deadlines", [](Failures& f) {
      {  // A past read deadline: writes work, reads time out.
        Pair p = make_pair();
        p.c.set_read_deadline(Clock::now() - 1s);
        Outcome w = attempt([&] { return p.c.write("ab"); });
        f.expect(w.is_ok() && w.n == 2, "write with a past read deadline: " + w.str());
        p.s.set_read_deadline(Clock::now() + kHang);
        f.expect(read_n(p.s, 2) == "ab", "peer did not get the write");
        std::byte b[4];
        Outcome r = attempt([&] { return p.c.read(b); });
        f.expect(r.is_timeout(), "read with a past read deadline: " + r.str());
      }
      {  // A past write deadline: reads work, writes time out.
        Pair p = make_pair();
        p.c.set_write_deadline(Clock::now() - 1s);
        p.s.write("cd");
        p.c.set_read_deadline(Clock::now() + kHang);
        std::string got = read_n(p.c, 2);
        f.expect(got == "cd", "read with a past write deadline got \"" + got + "\"");
        Outcome w = attempt([&] { return p.c.write("x"); });
        f.expect(w.is_timeout(), "write with a past write deadline: " + w.str());
      }
      {  // A blocked read (no read deadline) survives a write deadline passing.
        Pair p = make_pair();
        std::atomic<bool> returned{false};
        Outcome r;
        corun::WaitGroup wg;
        Join join(wg, [&] { p.c.close(); });
        go_safe(f, wg, "reader", [&] {
          std::byte b[1];
          r = attempt([&] { return p.c.read(b); });
          returned = true;
        });
        corun::sleep(20ms);
        p.c.set_write_deadline(Clock::now() + 10ms);
        corun::sleep(100ms);
        f.expect(!returned.load(), "a write deadline ended a read: " + r.str());
        p.c.set_write_deadline(Clock::now() - 1s);
        corun::sleep(50ms);
        f.expect(!returned.load(), "a past write deadline ended a read: " + r.str());
        p.s.write("r");
        wg.wait();
        f.expect(r.is_ok() && r.n == 1, "read: " + r.str());
      }
      {  // A blocked write (no write deadline) survives a read deadline passing.
        Pair p = make_pair();
        std::atomic<bool> returned{false};
        Outcome w;
        corun::WaitGroup wg;
        Join join(wg, [&] {
          p.c.close();
          p.s.close();
        });
        go_safe(f, wg, "writer", [&] {
          w = attempt([&] { return p.c.write(big_buffer()); });
          returned = true;
        });
        corun::sleep(20ms);
        p.c.set_read_deadline(Clock::now() + 10ms);
        corun::sleep(100ms);
        f.expect(!returned.load(), "a read deadline ended a write: " + w.str());
        p.c.set_read_deadline(Clock::now() - 1s);
        corun::sleep(50ms);
        f.expect(!returned.load(), "a past read deadline ended a write: " + w.str());
        // Drain: the write completes with every byte.
        p.s.set_read_deadline(Clock::now() + kHang);
        std::uint64_t want = fnv1a(big_buffer());
        Drained d;
        corun::WaitGroup dw;
        Join djoin(dw, [&] {
          p.c.close();
          p.s.close();
        });
        go_safe(f, dw, "drainer", [&] { d = read_to_eof(p.s); });
        wg.wait();
        p.c.close_write();
        dw.wait();
        f.expect(w.is_ok() && w.n == big_buffer().size(), "write: " + w.str());
        f.expect(d.n == big_buffer().size() && d.sum == want,
                 "peer got " + std::to_string(d.n) + " bytes / wrong checksum");
      }
    });
  }

  TEST_CASE("set_deadline sets both directions, also for calls blocked in both") {
    nrun("set_deadline both", [](Failures& f) {
      {
        Pair p = make_pair();
        p.c.set_deadline(Clock::now() - 1s);
        std::byte b[1];
        Outcome r = attempt([&] { return p.c.read(b); });
        Outcome w = attempt([&] { return p.c.write("x"); });
        f.expect(r.is_timeout(), "read after set_deadline(past): " + r.str());
        f.expect(w.is_timeout(), "write after set_deadline(past): " + w.str());
        p.c.set_deadline(TimePoint{});
        p.s.write("y");
        r = attempt([&] { return p.c.read(b); });
        w = attempt([&] { return p.c.write("x"); });
        f.expect(r.is_ok() && r.n == 1, "read after set_deadline({}): " + r.str());
        f.expect(w.is_ok() && w.n == 1, "write after set_deadline({}): " + w.str());
        // set_read_deadline after set_deadline changes only reads.
        p.c.set_deadline(Clock::now() - 1s);
        p.c.set_read_deadline(TimePoint{});
        w = attempt([&] { return p.c.write("x"); });
        f.expect(w.is_timeout(), "write after set_deadline(past), read cleared: " + w.str());
      }
      {  // One read and one write blocked; one set_deadline ends both.
        Pair p = make_pair();
        Outcome r, w;
        corun::WaitGroup wg;
        go_safe(f, wg, "reader", [&] {
          std::byte b[1];
          r = attempt([&] { return p.c.read(b); });
        });
        go_safe(f, wg, "writer", [&] { w = attempt([&] { return p.c.write(big_buffer()); }); });
        corun::sleep(50ms);
        auto t0 = Clock::now();
        p.c.set_deadline(t0 + 30ms);
        wg.wait();
        auto t1 = Clock::now();
        f.expect(r.is_timeout(), "blocked read after set_deadline: " + r.str());
        f.expect(w.is_timeout(), "blocked write after set_deadline: " + w.str());
        f.expect(t1 >= t0 + 30ms, "returned before the deadline");
        f.expect(t1 - t0 < kHang, "hung");
      }
    });
  }

  TEST_CASE("ReadWriteDeadlineRace: deadlines reset every 2us while a reader and a writer run") {
    nrun("ReadWriteDeadlineRace", [](Failures& f) {
      const int n = 1000 / t::kScale;
      net::Listener ln = net::listen("127.0.0.1:0");  // never accepts: the conn sits queued
      net::Conn c = net::dial(hostport("127.0.0.1", ln.port()), kHang);
      std::atomic<int> bad{0};
      std::string bad_what;
      auto note = [&](const Outcome& o) {
        if (!o.is_ok() && !o.is_timeout() && bad++ == 0) bad_what = o.str();
      };
      corun::WaitGroup wg;
      go_safe(f, wg, "setter", [&] {
        for (int i = 0; i < n; i++) {
          c.set_read_deadline(Clock::now() + 2us);
          c.set_write_deadline(Clock::now() + 2us);
          corun::sleep(2us);
        }
      });
      go_safe(f, wg, "reader", [&] {
        std::byte b[1];
        for (int i = 0; i < n; i++) note(attempt([&] { return c.read(b); }));
      });
      go_safe(f, wg, "writer", [&] {
        std::byte b[1] = {};
        for (int i = 0; i < n; i++) note(attempt([&] { return c.write(b); }));
      });
      wg.wait();
      f.expect(bad.load() == 0, "a call failed with neither success nor timeout: " + bad_what);
      // The conn is still usable (the peer accepts now and reads what was written).
      c.set_deadline(TimePoint{});
      Outcome o = attempt([&] { return c.write("!"); });
      f.expect(o.is_ok() && o.n == 1, "write after the race: " + o.str());
    });
  }

  TEST_CASE("ReadWriteProlongedTimeout: deadline +1h before every read/write, both sides") {
    CORUN_TEST_SKIP_IF_EMULATED(
        "its server writes 1-byte sends until the loopback buffer is full, millions of "
        "syscalls; emulated, they outlast the client's kHang bound");
    nrun("ReadWriteProlongedTimeout", [](Failures& f) {
      Pair p = make_pair();
      corun::WaitGroup wg;
      go_safe(f, wg, "server reader", [&] {
        std::byte b[1];
        for (;;) {
          p.s.set_read_deadline(Clock::now() + 1h);
          Outcome o = attempt([&] { return p.s.read(b); });
          if (!o.is_ok() || o.n == 0) {
            // EOF, or a reset: the client closes with the server's bytes unread (RST).
            f.expect(o.is_ok() || o.is_errno(ECONNRESET), "server read: " + o.str());
            return;
          }
        }
      });
      go_safe(f, wg, "server writer", [&] {
        std::byte b[1] = {};
        for (;;) {
          p.s.set_write_deadline(Clock::now() + 1h);
          Outcome o = attempt([&] { return p.s.write(b); });
          if (!o.is_ok()) {  // the client closed: a reset or a broken pipe
            f.expect(o.is_errno(EPIPE) || o.is_errno(ECONNRESET), "server write: " + o.str());
            return;
          }
        }
      });
      const int n = 1000 / t::kScale;
      p.c.set_deadline(Clock::now() + kHang);
      std::byte b[1] = {};
      for (int i = 0; i < n; i++) {
        Outcome w = attempt([&] { return p.c.write(std::span<const std::byte>(b, 1)); });
        Outcome r = attempt([&] { return p.c.read(b); });
        if (!f.expect(w.is_ok() && r.is_ok() && r.n == 1,
                      "client write " + w.str() + ", read " + r.str()))
          break;
      }
      // Close: the server reader sees EOF or a reset, the writer a reset or broken pipe.
      p.c.close();
      wg.wait();
    });
  }

  TEST_CASE("ConcurrentSetDeadline: 8 tasks move deadlines of 10 conns, then all usable") {
    nrun("ConcurrentSetDeadline", [](Failures& f) {
      net::Listener ln = net::listen("127.0.0.1:0");
      const std::string addr = hostport("127.0.0.1", ln.port());
      constexpr int kConns = 10, kTasks = 8;
      const int tries = 100 / t::kScale;
      std::vector<net::Conn> c, s;
      for (int i = 0; i < kConns; i++) {
        c.push_back(net::dial(addr, kHang));
        s.push_back(ln.accept());
      }
      corun::WaitGroup wg;
      auto now = Clock::now();
      for (int i = 0; i < kTasks; i++) {
        go_safe(f, wg, "setter", [&, i] {
          for (int j = tries; j > 0; j--) {  // steadily earlier deadlines
            for (int k = 0; k < kConns; k++) {
              c[k].set_read_deadline(now + 2h + std::chrono::seconds(i * j * k));
              c[k].set_write_deadline(now + 1h + std::chrono::seconds(i * j * k));
            }
          }
        });
      }
      wg.wait();
      for (int k = 0; k < kConns; k++) {
        Outcome w = attempt([&] { return c[k].write("p"); });
        s[k].write("q");
        std::byte b[1];
        Outcome r = attempt([&] { return c[k].read(b); });
        f.expect(w.is_ok() && r.is_ok() && r.n == 1,
                 "conn " + std::to_string(k) + ": write " + w.str() + ", read " + r.str());
      }
    });
  }

  TEST_CASE(
      "Server pattern: many conns, read deadline moved before every read; idle ones time out") {
    nrun("server pattern", [](Failures& f) {
      const int conns = t::live_cap(300) / 3;  // 2 tasks per conn plus slack under TSan
      const int msgs = 50 / t::kScale + 5;
      const Duration idle_limit = kSan ? Duration(3s) : Duration(300ms);
      net::Listener ln = net::listen("127.0.0.1:0");
      const std::string addr = hostport("127.0.0.1", ln.port());
      std::atomic<int> eofs{0}, timeouts{0}, echoed{0};
      corun::WaitGroup sw;
      go_safe(f, sw, "acceptor", [&] {
        corun::WaitGroup hw;
        for (int i = 0; i < conns; i++) {
          net::Conn c = ln.accept();
          go_safe(f, hw, "handler", [&, c = std::move(c)]() mutable {
            std::vector<std::byte> b(256);
            for (;;) {
              auto t0 = Clock::now();
              c.set_read_deadline(t0 + idle_limit);
              Outcome o = attempt([&] { return c.read(b); });
              if (o.is_timeout()) {
                f.expect(Clock::now() >= t0 + idle_limit, "server read timed out early");
                timeouts++;
                return;  // closes: the idle client reads EOF
              }
              if (!o.is_ok()) {
                f.add("server read: " + o.str());
                return;
              }
              if (o.n == 0) {
                eofs++;
                return;
              }
              c.set_write_deadline(Clock::now() + kHang);
              c.write(std::span<const std::byte>(b.data(), o.n));
              echoed += static_cast<int>(o.n);
            }
          });
        }
        hw.wait();
      });
      std::atomic<int> idle_eof{0};
      int idle = 0;
      corun::WaitGroup cw;
      for (int i = 0; i < conns; i++) {
        bool is_idle = i % 10 == 0;
        idle += is_idle;
        go_safe(f, cw, "client", [&, is_idle] {
          net::Conn c = net::dial(addr, kHang);
          c.set_deadline(Clock::now() + kHang);
          std::byte b[8];
          for (int m = 0; m < msgs; m++) {
            c.write("12345678");
            std::string got = read_n(c, 8);
            if (!f.expect(got == "12345678", "echo \"" + got + "\"")) return;
            if (m % 8 == 0) corun::sleep(idle_limit / 30);  // below the server's limit
          }
          if (is_idle) {  // go silent: the server times out and closes
            Outcome o = attempt([&] { return c.read(b); });
            f.expect(o.is_ok() && o.n == 0, "idle client read: " + o.str() + ", want EOF");
            idle_eof++;
          }
        });  // the others close: the server reads EOF
      }
      cw.wait();
      ln.close();  // every conn was accepted unless a client failed (recorded)
      sw.wait();
      f.expect(timeouts.load() == idle, "server timeouts " + std::to_string(timeouts.load()) +
                                            ", idle clients " + std::to_string(idle));
      f.expect(eofs.load() == conns - idle, "server EOFs " + std::to_string(eofs.load()));
      f.expect(idle_eof.load() == idle,
               "idle clients that read EOF: " + std::to_string(idle_eof.load()));
      f.expect(echoed.load() == conns * msgs * 8, "echoed " + std::to_string(echoed.load()));
    });
  }
}
