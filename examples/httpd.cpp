// examples/httpd.cpp — an HTTP/1.1 server on corun::net: `GET /` answers "hello world\n"
// (the bytes of the Go raw-TCP benchmark peer, peers/http/go/rawtcp), keep-alive and
// pipelining, with a deadline on every read and write.
//
//   build/examples/httpd [ADDR] [--header-timeout-ms N] [--idle-timeout-ms N]
//                        [--write-timeout-ms N] [--reuseport]  (ADDR default 127.0.0.1:8080)
// Prints "listening on HOST:PORT" once listening (port 0 picks one). CORUN_PROCS sets the
// number of Ps. SIGINT/SIGTERM end it (default action). --reuseport opens one SO_REUSEPORT
// listener per P, each with its own accept loop (measured: no gain with keep-alive load at
// 100 conns, 2 Ps: 60.7k/59.6k vs 61.7k/62.9k req/s; not the default).
//
// Shape: the main task accepts; each connection is one task (corun::go) that reads into
// its buffer, parses every complete request there (examples/http_parser.hpp), appends each
// response to one output string and writes the batch with one write, so a pipelining
// client gets one write per read. Responses: GET / is 200 (HEAD / the same head, no body),
// another method on / is 405, any other path 404; a request that fails to parse gets its
// status (400, 413, 431, 501, 505) with "Connection: close", and the connection closes.
//
// Deadlines (each a timer reset on the conn's read or write deadline; 0 disables one):
// - idle (default 5 s): set before the read that waits for the next request, when the
//   buffer holds no byte of one. In a keep-alive run this is one set_read_deadline per
//   read, as the Go raw peer does (SetReadDeadline(now+5s) before every Read): the
//   pattern the net benchmarks measure.
// - header (default 5 s): once the first bytes of a request are in the buffer and the
//   request is not complete, the read deadline moves to now + header, once per request,
//   not per read, so a client that sends its head a byte at a time (slow loris) is cut off
//   header ms after its request began however often it sends. It covers the body too
//   (bodies here are at most 1 MiB). The first request of a connection waits under it
//   from accept on (there is no "idle" before a first request).
// - write (default 5 s): set before every write; a client that does not read is dropped.
// A deadline that passes closes the connection silently (no 408), as Go and nginx do.
//
// Closing after an error response: close_write() (FIN), then read and discard for up to
// 500 ms until the client's EOF, then close. Closing with unread request bytes in the
// socket would make the kernel send RST, which can destroy the error response before the
// client reads it (a 413 client is typically still sending its body); Go's
// closeWriteAndWait and nginx's lingering_close exist for this.
//
// Memory per connection: a 4 KiB buffer, grown only as far as one request needs (head
// limit 8 KiB, body limit 1 MiB) and shrunk back when a big request is done; the parser
// and its header array live on the task's stack.
// Rejected: a Date header (the Go peer sends none, and a per-second formatted clock is
//   extra shared state the benchmark would measure); chunked request bodies (501, see
//   http_parser.hpp); one reader task and one writer task per connection (Go's net/http
//   background read): two tasks and a channel per request for no gain when responses are
//   produced in order without waiting.
#include <corun/corun.hpp>
#include <corun/net.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "http_parser.hpp"

namespace {

using namespace std::chrono_literals;
using corun::Clock;
using corun::Duration;

struct Options {
  std::string addr = "127.0.0.1:8080";
  Duration header_timeout = 5s;
  Duration idle_timeout = 5s;
  Duration write_timeout = 5s;
  bool reuseport = false;  // one SO_REUSEPORT listener and accept loop per P
};

// The Go raw peer's response, byte for byte: the keep-alive HTTP/1.1 answer to GET /.
constexpr std::string_view kHello =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 12\r\n\r\nhello world\n";
constexpr std::string_view kHelloBody = "hello world\n";

constexpr std::size_t kInitialBuffer = 4096;
constexpr std::size_t kMaxBuffer = http::RequestParser::kMaxHead + http::RequestParser::kMaxBody;
constexpr auto kLinger = 500ms;

std::string_view reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 505:
      return "HTTP Version Not Supported";
  }
  return "Unknown";
}

enum class ConnHeader { kNone, kKeepAlive, kClose };

// Appends a response with a text/plain body (headers only when head_only: HEAD).
void append_response(std::string& out, int status, std::string_view body, ConnHeader conn,
                     bool head_only = false, std::string_view extra_header = {}) {
  out += "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += reason(status);
  out += "\r\nContent-Type: text/plain\r\nContent-Length: ";
  out += std::to_string(body.size());
  out += "\r\n";
  if (conn == ConnHeader::kClose) out += "Connection: close\r\n";
  if (conn == ConnHeader::kKeepAlive) out += "Connection: keep-alive\r\n";
  if (!extra_header.empty()) {
    out += extra_header;
    out += "\r\n";
  }
  out += "\r\n";
  if (!head_only) out += body;
}

// Appends the answer to one parsed request.
void handle(const http::Request& req, std::string& out) {
  // HTTP/1.0 keep-alive must be confirmed; HTTP/1.1 says "close" when it closes.
  ConnHeader conn = !req.keep_alive          ? ConnHeader::kClose
                    : req.version_minor == 0 ? ConnHeader::kKeepAlive
                                             : ConnHeader::kNone;
  std::string_view path = req.target.substr(0, req.target.find('?'));
  if (path != "/") {
    append_response(out, 404, "404 page not found\n", conn, req.method == "HEAD");
  } else if (req.method == "GET" && conn == ConnHeader::kNone) {
    out += kHello;  // the hot path: one append of a constant
  } else if (req.method == "GET" || req.method == "HEAD") {
    append_response(out, 200, kHelloBody, conn, req.method == "HEAD");
  } else {
    append_response(out, 405, "405 method not allowed\n", conn, false, "Allow: GET, HEAD");
  }
}

Clock::time_point deadline_after(Duration d) {
  return d > Duration::zero() ? Clock::now() + d : Clock::time_point{};
}

// The connection's byte buffer: [0, len) holds the unparsed bytes (at most one partial
// request after compaction).
struct Buffer {
  std::unique_ptr<char[]> data = std::make_unique<char[]>(kInitialBuffer);
  std::size_t cap = kInitialBuffer;
  std::size_t len = 0;

  void resize(std::size_t new_cap) {
    auto d = std::make_unique<char[]>(new_cap);
    std::memcpy(d.get(), data.get(), len);
    data = std::move(d);
    cap = new_cap;
  }
  // Room for at least one more byte, or `want` bytes in all (a known request size).
  void make_room(std::size_t want) {
    if (len < cap && want <= cap) return;
    std::size_t n = std::max({cap * 2, want, len + 1});
    resize(std::min(n, kMaxBuffer));
  }
};

// After the last response: FIN, drain until the client's EOF or kLinger, close.
void linger_close(corun::net::Conn& c, Buffer& buf) {
  try {
    c.close_write();
    c.set_read_deadline(Clock::now() + kLinger);
    while (c.read(std::as_writable_bytes(std::span<char>(buf.data.get(), buf.cap))) > 0) {
    }
  } catch (const std::exception&) {
    // timeout, reset: the close below is all that is left to do
  }
  c.close();
}

// Serves one connection until EOF, an error, a deadline or "Connection: close".
// Throws what the conn throws (timeout_error, std::system_error).
void serve(corun::net::Conn& c, const Options& o) {
  Buffer buf;
  http::RequestParser parser;
  std::string out;
  enum class Armed { kNone, kIdle, kRequest } armed = Armed::kNone;  // the read deadline
  bool first = true;           // no request finished yet on this conn
  bool continue_sent = false;  // "100 Continue" sent for the current request
  for (;;) {
    // The read deadline: idle while no byte of a request is here, else header, once.
    if (buf.len == 0 && armed == Armed::kNone) {
      c.set_read_deadline(deadline_after(first ? o.header_timeout : o.idle_timeout));
      armed = first ? Armed::kRequest : Armed::kIdle;
    } else if (buf.len > 0 && armed != Armed::kRequest) {
      c.set_read_deadline(deadline_after(o.header_timeout));
      armed = Armed::kRequest;
    }
    buf.make_room(parser.wanted());
    std::size_t n = c.read(
        std::as_writable_bytes(std::span<char>(buf.data.get() + buf.len, buf.cap - buf.len)));
    if (n == 0) return;  // EOF (mid-request too: nothing to answer)
    buf.len += n;

    // Answer every complete request in the buffer, in one batch.
    out.clear();
    std::size_t start = 0;
    bool close = false;
    while (!close) {
      http::Result r = parser.parse(std::string_view(buf.data.get() + start, buf.len - start));
      if (r.outcome == http::Outcome::kNeedMore) break;
      if (r.outcome == http::Outcome::kError) {
        std::string body = std::to_string(r.status) + " " + std::string(reason(r.status)) + "\n";
        append_response(out, r.status, body, ConnHeader::kClose);
        close = true;
        break;
      }
      handle(parser.request(), out);
      close = !parser.request().keep_alive;
      start += r.consumed;
      first = false;
      continue_sent = false;
      armed = Armed::kNone;  // the next request gets its own deadline
    }
    if (!close && parser.expect_continue() && !continue_sent) {
      out += "HTTP/1.1 100 Continue\r\n\r\n";
      continue_sent = true;
    }
    if (!out.empty()) {
      if (o.write_timeout > Duration::zero()) c.set_write_deadline(deadline_after(o.write_timeout));
      c.write(out);
    }
    if (close) {
      linger_close(c, buf);
      return;
    }
    // Keep the partial request (if any) at the front; give back a big buffer.
    buf.len -= start;
    if (buf.len > 0 && start > 0) std::memmove(buf.data.get(), buf.data.get() + start, buf.len);
    if (buf.cap > 16 * kInitialBuffer && buf.len <= kInitialBuffer) buf.resize(kInitialBuffer);
    if (out.capacity() > 16 * kInitialBuffer) std::string().swap(out);
  }
}

// Accepts "--name N", "--name=N", "-name N" and "-name=N"; milliseconds, >= 0.
bool parse_args(int argc, char** argv, Options& o) {
  bool have_addr = false;
  for (int i = 1; i < argc; i++) {
    std::string_view a = argv[i];
    if (a.size() > 1 && a[0] == '-') {
      a.remove_prefix(a.size() > 2 && a[1] == '-' ? 2 : 1);
      if (a == "reuseport") {
        o.reuseport = true;
        continue;
      }
      std::string_view value;
      bool have_value = false;
      if (std::size_t eq = a.find('='); eq != std::string_view::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        have_value = true;
      } else if (i + 1 < argc) {
        value = argv[++i];
        have_value = true;
      }
      Duration* d = a == "header-timeout-ms"  ? &o.header_timeout
                    : a == "idle-timeout-ms"  ? &o.idle_timeout
                    : a == "write-timeout-ms" ? &o.write_timeout
                                              : nullptr;
      if (d == nullptr || !have_value) return false;
      std::string v(value);
      char* end = nullptr;
      long long ms = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || ms < 0) return false;
      *d = std::chrono::milliseconds(ms);
    } else if (!have_addr) {
      o.addr = a;
      have_addr = true;
    } else {
      return false;
    }
  }
  return true;
}

void accept_loop(corun::net::Listener& ln, const Options& o) {
  for (;;) {
    corun::net::Conn c;
    try {
      c = ln.accept();  // out of descriptors, it backs off and retries by itself
    } catch (const std::system_error& e) {
      if (e.code() == std::errc::bad_file_descriptor) return;
      std::fprintf(stderr, "httpd: accept: %s\n", e.what());
      corun::sleep(5ms);  // ENOBUFS and the like: do not spin on a lasting error
      continue;
    }
    corun::go([c = std::move(c), &o]() mutable {
      try {
        serve(c, o);
      } catch (const corun::net::timeout_error&) {
        // a deadline passed: drop the connection
      } catch (const std::system_error&) {
        // reset, broken pipe: the client is gone
      } catch (const std::exception& e) {
        std::fprintf(stderr, "httpd: connection: %s\n", e.what());
      }
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_args(argc, argv, o)) {
    std::fprintf(
        stderr,
        "usage: %s [ADDR] [--header-timeout-ms N] [--idle-timeout-ms N] "
        "[--write-timeout-ms N] [--reuseport]\n  ADDR default 127.0.0.1:8080; timeouts default "
        "5000 ms, 0 disables\n",
        argv[0]);
    return 2;
  }
  int rc = 0;
  corun::run([&] {
    // --reuseport: one listener per P on the same address (SO_REUSEPORT), the kernel
    // spreading connections over their accept queues, one accept loop each.
    const int n = o.reuseport ? corun::procs() : 1;
    std::vector<corun::net::Listener> lns;
    try {
      corun::net::ListenOptions lo;
      lo.reuse_port = o.reuseport;
      for (int i = 0; i < n; i++) lns.push_back(corun::net::listen(o.addr, lo));
      // Port 0: the others join the first one's port.
      if (o.reuseport && o.addr.ends_with(":0"))
        for (int i = 1; i < n; i++)
          lns[static_cast<std::size_t>(i)] = corun::net::listen(lns[0].addr(), lo);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "httpd: listen %s: %s\n", o.addr.c_str(), e.what());
      rc = 1;
      return;
    }
    std::printf("listening on %s\n", lns[0].addr().c_str());
    std::fflush(stdout);
    for (int i = 1; i < n; i++)
      corun::go([&ln = lns[static_cast<std::size_t>(i)], &o] { accept_loop(ln, o); });
    accept_loop(lns[0], o);
  });
  return rc;
}
