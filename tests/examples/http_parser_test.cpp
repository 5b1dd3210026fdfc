// tests/examples/http_parser_test.cpp — the HTTP/1.1 request parser of examples/httpd.cpp
// (examples/http_parser.hpp): simple and pipelined requests, every split of the input
// into two feeds and byte-at-a-time feeding (same answer as one feed), the bounds (431,
// 413), malformed requests (400, 501, 505) and the keep-alive rules of HTTP/1.0 and 1.1.
// The parser has no runtime dependency: a unit suite. Its fuzz target is
// fuzz/http_parser_fuzz.cpp (make fuzz).
#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "../../examples/http_parser.hpp"

namespace {
using http::Outcome;
using http::RequestParser;
using http::Result;

// What a request parsed to, copied out of the buffer (the views die with it).
struct Parsed {
  Outcome outcome = Outcome::kNeedMore;
  std::size_t consumed = 0;
  int status = 0;
  std::string method, target, body;
  int minor = -1;
  bool keep_alive = false;
  std::size_t headers = 0;
  bool operator==(const Parsed&) const = default;
};

Parsed capture(const RequestParser& p, Result r) {
  Parsed out;
  out.outcome = r.outcome;
  out.consumed = r.consumed;
  out.status = r.status;
  if (r.outcome == Outcome::kComplete) {
    const http::Request& q = p.request();
    out.method = q.method;
    out.target = q.target;
    out.body = q.body;
    out.minor = q.version_minor;
    out.keep_alive = q.keep_alive;
    out.headers = q.headers.size();
  }
  return out;
}

Parsed parse_once(std::string_view in) {
  RequestParser p;
  return capture(p, p.parse(in));
}

// Feeds the bytes of `in` in pieces ending at each cut, through a buffer that is copied to
// fresh storage on every call (so a parser keeping pointers instead of offsets fails),
// until the parser answers something other than kNeedMore.
Parsed parse_split(std::string_view in, const std::vector<std::size_t>& cuts) {
  RequestParser p;
  std::string acc;
  std::size_t from = 0;
  auto feed = [&](std::size_t to) {
    acc.append(in.substr(from, to - from));
    from = to;
    std::string moved = acc;  // new storage each call
    Result r = p.parse(moved);
    Parsed out = capture(p, r);
    if (r.outcome == Outcome::kComplete) CHECK(r.consumed <= moved.size());
    return out;
  };
  for (std::size_t c : cuts) {
    Parsed out = feed(c);
    if (out.outcome != Outcome::kNeedMore) return out;
  }
  return feed(in.size());
}

Parsed parse_bytewise(std::string_view in) {
  std::vector<std::size_t> cuts;
  for (std::size_t i = 1; i < in.size(); i++) cuts.push_back(i);
  return parse_split(in, cuts);
}

int status_of(std::string_view in) {
  Parsed p = parse_once(in);
  CHECK(p.outcome == Outcome::kError);
  CHECK(parse_bytewise(in) == p);
  return p.status;
}

bool keep_alive_of(std::string_view in) {
  Parsed p = parse_once(in);
  REQUIRE(p.outcome == Outcome::kComplete);
  return p.keep_alive;
}

const std::string kGet = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
}  // namespace

TEST_SUITE("unit.http_parser") {
  TEST_CASE("a simple GET") {
    RequestParser p;
    std::string in =
        "GET /index.html?q=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n"
        "X-Empty:\r\nUser-Agent:  curl/8.0 \t\r\n\r\n";
    Result r = p.parse(in);
    REQUIRE(r.outcome == Outcome::kComplete);
    CHECK(r.consumed == in.size());
    const http::Request& q = p.request();
    CHECK(q.method == "GET");
    CHECK(q.target == "/index.html?q=1");
    CHECK(q.version_minor == 1);
    CHECK(q.keep_alive);
    CHECK_FALSE(q.expect_continue);
    CHECK(q.body.empty());
    REQUIRE(q.headers.size() == 4);
    CHECK(q.headers[0].name == "Host");
    CHECK(q.headers[0].value == "example.com");
    CHECK(q.header("HOST") == "example.com");
    CHECK(q.header("x-empty").empty());
    CHECK(q.header("user-agent") == "curl/8.0");  // OWS trimmed on both sides
    CHECK(q.header("missing").data() == nullptr);
  }

  TEST_CASE("need more until the empty line, then the body") {
    RequestParser p;
    CHECK(p.parse("").outcome == Outcome::kNeedMore);
    CHECK(p.parse("GET / HTTP/1.1\r\nHost: x\r\n").outcome == Outcome::kNeedMore);
    CHECK(p.wanted() == 0);
    std::string head = "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n";
    p.reset();
    CHECK(p.parse(head).outcome == Outcome::kNeedMore);
    CHECK(p.wanted() == head.size() + 5);
    CHECK(p.parse(head + "abcd").outcome == Outcome::kNeedMore);
    const std::string full = head + "abcdeGET";  // the request's views point into it
    Result r = p.parse(full);
    REQUIRE(r.outcome == Outcome::kComplete);
    CHECK(r.consumed == head.size() + 5);
    CHECK(p.request().body == "abcde");
    CHECK(p.request().content_length == 5);
    CHECK(p.wanted() == 0);  // ready for the next request
  }

  TEST_CASE("three pipelined requests in one buffer") {
    std::string in = kGet + "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" +
                     "GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    RequestParser p;
    std::string_view rest = in;
    std::vector<std::string> targets, bodies;
    std::vector<bool> keep;
    for (;;) {
      Result r = p.parse(rest);
      if (r.outcome != Outcome::kComplete) {
        CHECK(r.outcome == Outcome::kNeedMore);
        break;
      }
      targets.emplace_back(p.request().target);
      bodies.emplace_back(p.request().body);
      keep.push_back(p.request().keep_alive);
      rest.remove_prefix(r.consumed);
    }
    CHECK(rest.empty());
    CHECK(targets == std::vector<std::string>{"/", "/p", "/last"});
    CHECK(bodies == std::vector<std::string>{"", "abc", ""});
    CHECK(keep == std::vector<bool>{true, true, false});
  }

  TEST_CASE("every split point gives the answer of one feed") {
    std::vector<std::string> inputs = {
        kGet,
        "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789",
        "\r\n\nGET / HTTP/1.0\nConnection: keep-alive\n\n",
        "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\n",  // a second, partial request
        "GET / HTTP/1.1\r\nHost : x\r\n\r\n",                    // 400
        "GET / HTTP/2.0\r\n",                                    // 505 at the line's end
        "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",  // 501
        "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n",     // 413
    };
    for (const std::string& in : inputs) {
      CAPTURE(in);
      Parsed once = parse_once(in);
      CHECK(once.outcome != Outcome::kNeedMore);
      for (std::size_t cut = 0; cut <= in.size(); cut++) {
        CAPTURE(cut);
        CHECK(parse_split(in, {cut}) == once);
      }
      CHECK(parse_bytewise(in) == once);
    }
  }

  TEST_CASE("a head over kMaxHead bytes is 431, at exactly the bound too") {
    std::string big = "GET / HTTP/1.1\r\nHost: x\r\nX-Fill: ";
    std::string tail = "\r\n\r\n";
    // A head of exactly kMaxHead bytes passes; one byte more is 431.
    std::string fits =
        big + std::string(RequestParser::kMaxHead - big.size() - tail.size(), 'a') + tail;
    CHECK(fits.size() == RequestParser::kMaxHead);
    CHECK(parse_once(fits).outcome == Outcome::kComplete);
    std::string over =
        big + std::string(RequestParser::kMaxHead - big.size() - tail.size() + 1, 'a') + tail;
    CHECK(status_of(over) == 431);
    // No end of head in sight: 431 as soon as kMaxHead bytes are there, not before.
    std::string endless(RequestParser::kMaxHead, 'a');
    endless.replace(0, 20, "GET / HTTP/1.1\r\nX: y");
    RequestParser p;
    CHECK(p.parse(std::string_view(endless).substr(0, endless.size() - 1)).outcome ==
          Outcome::kNeedMore);
    Result r = p.parse(endless);
    CHECK(r.outcome == Outcome::kError);
    CHECK(r.status == 431);
    CHECK(p.parse(endless + "\r\n\r\n").status == 431);  // sticky
    // Leading empty lines count toward the bound.
    CHECK(status_of(std::string(RequestParser::kMaxHead, '\n')) == 431);
    // Too many fields.
    std::string many = "GET / HTTP/1.1\r\nHost: x\r\n";
    for (std::size_t i = 0; i < RequestParser::kMaxHeaders; i++) many += "a: b\r\n";
    CHECK(status_of(many + "\r\n") == 431);
  }

  TEST_CASE("a body over kMaxBody is 413, decided from the head") {
    std::string at =
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(RequestParser::kMaxBody) +
        "\r\n\r\n";
    RequestParser p;
    CHECK(p.parse(at).outcome == Outcome::kNeedMore);
    CHECK(p.wanted() == at.size() + RequestParser::kMaxBody);
    std::string over = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                       std::to_string(RequestParser::kMaxBody + 1) + "\r\n\r\n";
    CHECK(status_of(over) == 413);
    CHECK(status_of("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999\r\n\r\n") == 413);
  }

  TEST_CASE("malformed requests are 400") {
    const char* bad[] = {
        "G@T / HTTP/1.1\r\nHost: x\r\n\r\n",             // method not a token
        " GET / HTTP/1.1\r\nHost: x\r\n\r\n",            // leading space
        "GET  / HTTP/1.1\r\nHost: x\r\n\r\n",            // two spaces
        "GET / HTTP/1.1 \r\nHost: x\r\n\r\n",            // trailing space
        "GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",          // space in the target
        "GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n",         // control byte in the target
        "GET / HTTP/1.1\rHost: x\r\n\r\n",               // bare CR
        "GET / HTTP/1.1\r\r\nHost: x\r\n\r\n",           // CR CR LF
        "GET / HTTP/1\r\nHost: x\r\n\r\n",               // bad version
        "GET / http/1.1\r\nHost: x\r\n\r\n",             // version is case-sensitive
        "GET / HTTP/1.10\r\nHost: x\r\n\r\n",            // one digit each
        "GET /\r\nHost: x\r\n\r\n",                      // HTTP/0.9 form
        "GET / HTTP/1.1\r\nHost x\r\n\r\n",              // no colon
        "GET / HTTP/1.1\r\nHost : x\r\n\r\n",            // whitespace before the colon
        "GET / HTTP/1.1\r\nHost\t: x\r\n\r\n",           // tab before the colon
        "GET / HTTP/1.1\r\n: x\r\nHost: x\r\n\r\n",      // empty name
        "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",  // obs-fold
        "GET / HTTP/1.1\r\nHost: x\r\nA: b\x01"
        "c\r\n\r\n",                                     // control byte in a value
        "GET / HTTP/1.1\r\nHost: x\r\nA: b\rc\r\n\r\n",  // CR in a value
        "GET / HTTP/1.1\r\n\r\n",                        // HTTP/1.1 without Host
        "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",  // two Hosts
        "GET / HTTP/1.0\r\nHost: x\r\nHost: x\r\n\r\n",  // two Hosts on 1.0 too
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x10\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    };
    for (const char* in : bad) {
      CAPTURE(in);
      CHECK(status_of(in) == 400);
    }
    // A bad request line is answered when its line ends, before the rest of the head.
    RequestParser p;
    Result r = p.parse("GET / HTTP/1.1 x\r\n");
    CHECK(r.outcome == Outcome::kError);
    CHECK(r.status == 400);
    p.reset();
    CHECK(p.parse(kGet).outcome == Outcome::kComplete);  // reset clears the error
  }

  TEST_CASE("accepted variants: bare LF, leading empty lines, repeated equal lengths") {
    Parsed lf = parse_once("GET / HTTP/1.1\nHost: x\n\n");
    CHECK(lf.outcome == Outcome::kComplete);
    CHECK(lf.consumed == 24);
    CHECK(parse_once("GET / HTTP/1.1\r\nHost: x\n\r\n").outcome == Outcome::kComplete);
    Parsed lead = parse_once("\r\n\r\n" + kGet);
    CHECK(lead.outcome == Outcome::kComplete);
    CHECK(lead.consumed == 4 + kGet.size());
    Parsed two = parse_once(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\ncontent-length: 02\r\n\r\nab");
    CHECK(two.outcome == Outcome::kComplete);
    CHECK(two.body == "ab");
    CHECK(parse_once("GET / HTTP/1.2\r\nHost: x\r\n\r\n").minor == 1);  // served as 1.1
    CHECK(parse_once("GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n").target == "/\xc3\xa9");
    CHECK(parse_once("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n").target == "*");
    CHECK(parse_once("GET / HTTP/1.1\r\nHost: x\r\nA: b\tc\r\n\r\n").outcome == Outcome::kComplete);
  }

  TEST_CASE("other statuses: 501 for Transfer-Encoding, 505 for another major version") {
    CHECK(status_of("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n") == 501);
    CHECK(status_of("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n"
                    "Content-Length: 3\r\n\r\nabc") == 501);
    CHECK(status_of("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") == 505);
    CHECK(status_of("GET / HTTP/0.9\r\n\r\n") == 505);
  }

  TEST_CASE("keep-alive rules of HTTP/1.1 and HTTP/1.0") {
    CHECK(keep_alive_of("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    CHECK_FALSE(keep_alive_of("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    CHECK_FALSE(keep_alive_of("GET / HTTP/1.1\r\nHost: x\r\nConnection: CLOSE\r\n\r\n"));
    CHECK_FALSE(keep_alive_of("GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade,  Close \r\n\r\n"));
    CHECK_FALSE(keep_alive_of(
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n"));
    CHECK(keep_alive_of("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"));
    CHECK(keep_alive_of("GET / HTTP/1.1\r\nHost: x\r\nConnection: closed\r\n\r\n"));
    CHECK(keep_alive_of("GET / HTTP/1.1\r\nHost: x\r\nX-Connection: close\r\n\r\n"));

    CHECK_FALSE(keep_alive_of("GET / HTTP/1.0\r\n\r\n"));  // no Host needed on 1.0
    Parsed p10 = parse_once("GET / HTTP/1.0\r\n\r\n");
    CHECK(p10.minor == 0);
    CHECK(keep_alive_of("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    CHECK(keep_alive_of("GET / HTTP/1.0\r\nHost: x\r\nConnection: foo, keep-alive\r\n\r\n"));
    CHECK_FALSE(keep_alive_of("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"));
  }

  TEST_CASE("Expect: 100-continue is seen once the head is parsed, on HTTP/1.1 only") {
    RequestParser p;
    std::string head =
        "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\n"
        "Content-Length: 2\r\n\r\n";
    CHECK_FALSE(p.expect_continue());
    CHECK(p.parse(head).outcome == Outcome::kNeedMore);
    CHECK(p.expect_continue());
    REQUIRE(p.parse(head + "ok").outcome == Outcome::kComplete);
    CHECK(p.request().expect_continue);
    CHECK_FALSE(p.expect_continue());  // the next request has not started
    RequestParser q;
    CHECK(q.parse("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n").outcome ==
          Outcome::kNeedMore);
    CHECK_FALSE(q.expect_continue());
  }

  TEST_CASE("views follow the bytes when the buffer moves between calls") {
    RequestParser p;
    std::string a = "POST /moved HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n";
    CHECK(p.parse(a).outcome == Outcome::kNeedMore);
    std::string b = a + "xyz";  // other storage, the old prefix
    a.assign(a.size(), '#');    // the old bytes are gone
    REQUIRE(p.parse(b).outcome == Outcome::kComplete);
    CHECK(p.request().target == "/moved");
    CHECK(p.request().header("host") == "x");
    CHECK(p.request().body == "xyz");
  }
}
