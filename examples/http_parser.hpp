// examples/http_parser.hpp — an incremental HTTP/1.1 request parser (RFC 9112) for
// examples/httpd.cpp; header-only, standard library only, no corun dependency.
//
// Use: bytes arrive in a buffer; call parse(in) with the bytes of the current request so
// far (the buffer from the request's first byte). It answers kNeedMore, kComplete (with
// `consumed`, the request's bytes, head and body, so a pipelined request starts at
// in + consumed), or kError with the status to answer before closing (400, 413, 431,
// 501, 505). After kComplete, request() describes the request with string_views into `in`
// (valid while those bytes are), and the parser is ready for the next request.
//
// Invariants:
// - Between calls the caller only appends: the next `in` holds the previous one as a
//   prefix (the bytes may have moved, as after compacting or growing the buffer: the
//   parser keeps offsets, never pointers). It never reads in[i] for i >= in.size().
// - The outcome depends only on the bytes, not on how they were split across calls:
//   feeding a request byte by byte gives the answer that parsing it at once gives. Errors
//   are therefore only decided on complete units: the request line once its line ends,
//   the head once its empty line arrives, and 431 once kMaxHead bytes hold no end of head.
// - Each byte of the head is scanned once while the head is incomplete (memchr for LF,
//   resuming where the last call stopped), so a client sending one byte per read costs
//   O(n), not O(n^2). A complete head is validated in one more pass; a head whose body
//   is still arriving is parsed once more when the body is complete (the buffer may
//   have moved, so views are rebuilt then). No allocation: header fields go to a fixed
//   array of kMaxHeaders in the parser.
// - An error is sticky until reset(): the connection is to be closed after answering.
//
// Policies (each a choice RFC 9112 leaves to the server, or one it mandates):
// - Lines end in CRLF; a bare LF is accepted as a line end too (RFC 9112 §2.2 "MAY", as
//   Go's net/textproto and nginx do). A CR anywhere else is an error (400).
// - Empty lines before the request line are skipped (RFC 9112 §2.2 "SHOULD"; clients
//   sent an extra CRLF after POST bodies); they count toward kMaxHead.
// - Request line: method SP target SP version, single spaces. Method: a token. Target:
//   non-empty, no SP or control bytes (bytes >= 0x80 pass, as in Go). Version:
//   HTTP/1.0 or HTTP/1.1; HTTP/1.n for n >= 2 is served as 1.1 (RFC 9110 §6.2);
//   HTTP/d.d with another major is 505; anything else 400.
// - Header field: token name, ':' right after it (whitespace before the colon is a 400,
//   RFC 9112 §5.1 "MUST"), value trimmed of SP/HTAB, no control bytes but HTAB (400).
//   A line starting with whitespace (obs-fold) is a 400 (RFC 9112 §5.2 allows it).
//   More than kMaxHeaders fields: 431, like a head over kMaxHead bytes.
// - HTTP/1.1 needs exactly one Host field; none or several: 400 (RFC 9112 §3.2 "MUST").
// - Content-Length: 1*DIGIT, fitting 64 bits; repeated fields must agree, a comma list
//   is a 400 (as Go); more than kMaxBody: 413 (decided from the head, before any body).
// - Transfer-Encoding (of any value, chunked too): 501, and the connection closes.
//   Rejected: a chunked decoder. Chunked request bodies are rare from the clients this
//   example serves, and a second framing in a parser that fronts untrusted input is what
//   request smuggling lives on (TE + CL disagreements); RFC 9112 §6.1 lets a server
//   answer 501 for a coding it does not implement.
// - Keep-alive: HTTP/1.1 keeps the connection unless a Connection field lists "close";
//   HTTP/1.0 closes unless it lists "keep-alive" (and not "close"). Case-insensitive
//   tokens, comma lists, several Connection fields combine.
// - "Expect: 100-continue" on HTTP/1.1 sets expect_continue() as soon as the head is
//   parsed (even while the body is pending), so the server can send 100 Continue;
//   on HTTP/1.0 it is ignored (RFC 9110 §10.1.1).
// Rejected: re-parsing the whole buffer on each call (picohttpparser's model without its
// last_len hint): O(n^2) for a byte-at-a-time client; a byte-by-byte state machine
// (node's llhttp): more states than a request-only parser needs, and memchr over the
// buffer is faster than a switch per byte.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace http {

struct Header {
  std::string_view name;   // a token, as sent (compare with iequals)
  std::string_view value;  // without leading and trailing SP/HTAB
};

// Bytes are compared as ASCII: field names and tokens are ASCII by grammar.
inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); i++) {
    unsigned char x = static_cast<unsigned char>(a[i]), y = static_cast<unsigned char>(b[i]);
    if (x >= 'A' && x <= 'Z') x = static_cast<unsigned char>(x + 32);
    if (y >= 'A' && y <= 'Z') y = static_cast<unsigned char>(y + 32);
    if (x != y) return false;
  }
  return true;
}

struct Request {
  std::string_view method;  // a token, case-sensitive ("GET")
  std::string_view target;  // as sent: "/", "/a?b", "http://h/", "*"
  int version_minor = 1;    // 0 or 1 (HTTP/1.n, n >= 2, reads as 1)
  std::span<const Header> headers;
  std::string_view body;  // Content-Length bytes; empty without one
  std::uint64_t content_length = 0;
  bool keep_alive = true;        // the connection may carry another request after this one
  bool expect_continue = false;  // HTTP/1.1 "Expect: 100-continue"

  // The first field named `name` (case-insensitive), or an empty view (also null data).
  std::string_view header(std::string_view name) const {
    for (const Header& h : headers)
      if (iequals(h.name, name)) return h.value;
    return {};
  }
};

enum class Outcome : std::uint8_t {
  kNeedMore,  // append bytes and call again
  kComplete,  // request() is the request; `consumed` bytes belong to it
  kError,     // answer `status`, then close; sticky until reset()
};

struct Result {
  Outcome outcome;
  std::size_t consumed;  // kComplete: head + body bytes; otherwise 0
  int status;            // kError: 400, 413, 431, 501 or 505; otherwise 0
};

class RequestParser {
 public:
  static constexpr std::size_t kMaxHead = 8 * 1024;  // leading empty lines + head, with its
                                                     // terminating empty line
  static constexpr std::size_t kMaxBody = 1 << 20;   // Content-Length over this: 413
  static constexpr std::size_t kMaxHeaders = 100;    // fields; more: 431 (Apache's default)

  // `in`: the bytes of the current request so far (see the invariants above).
  Result parse(std::string_view in) {
    if (error_ != 0) return {Outcome::kError, 0, error_};
    if (head_end_ == 0) {
      if (int st = scan(in); st != 0) return fail(st);
      if (head_end_ == 0) {
        if (in.size() >= kMaxHead) return fail(431);
        return {Outcome::kNeedMore, 0, 0};
      }
      if (int st = parse_head(in); st != 0) return fail(st);
    } else if (in.size() >= head_end_ + body_len_) {
      parse_head(in);  // the body is here: rebuild the views (cannot fail a second time)
    }
    if (in.size() < head_end_ + body_len_) return {Outcome::kNeedMore, 0, 0};
    req_.body = in.substr(head_end_, body_len_);
    std::size_t n = head_end_ + body_len_;
    reset();
    return {Outcome::kComplete, n, 0};
  }

  // The last complete request (views into the `in` of that parse call).
  const Request& request() const { return req_; }

  // Head parsed, body pending: the bytes the whole request takes (to size a buffer),
  // and whether the client waits for "100 Continue". Otherwise 0 and false.
  std::size_t wanted() const { return head_end_ ? head_end_ + body_len_ : 0; }
  bool expect_continue() const { return head_end_ != 0 && req_.expect_continue; }

  // Forget the partial request and any error: the next parse starts a new request.
  void reset() {
    scan_pos_ = line_begin_ = head_begin_ = head_end_ = 0;
    body_len_ = 0;
    in_head_ = false;
    error_ = 0;
  }

 private:
  Result fail(int status) {
    reset();
    error_ = status;
    return {Outcome::kError, 0, status};
  }

  static bool is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
    return c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
  }
  static bool is_token(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
      if (!is_tchar(static_cast<unsigned char>(c))) return false;
    return true;
  }
  static bool is_ctl(unsigned char c) { return c < 0x20 || c == 0x7f; }
  static bool is_ows(char c) { return c == ' ' || c == '\t'; }

  // Finds the end of the head in in[0, min(size, kMaxHead)), resuming at scan_pos_, and
  // checks the request line as soon as its line ends. Returns 0 or an error status.
  int scan(std::string_view in) {
    const std::size_t limit = in.size() < kMaxHead ? in.size() : kMaxHead;
    while (scan_pos_ < limit) {
      const void* nl = std::memchr(in.data() + scan_pos_, '\n', limit - scan_pos_);
      if (nl == nullptr) {
        scan_pos_ = limit;
        break;
      }
      const std::size_t lf = static_cast<std::size_t>(static_cast<const char*>(nl) - in.data());
      std::size_t end = lf;  // the line is [line_begin_, end): without its LF or CRLF
      if (end > line_begin_ && in[end - 1] == '\r') end--;
      scan_pos_ = lf + 1;
      if (end == line_begin_) {  // an empty line
        if (!in_head_) {
          head_begin_ = line_begin_ = scan_pos_;  // before the request line: skipped
          continue;
        }
        head_end_ = scan_pos_;
        return 0;
      }
      if (!in_head_) {
        in_head_ = true;
        Request r;
        if (int st = parse_request_line(in.substr(line_begin_, end - line_begin_), r); st != 0)
          return st;
      }
      line_begin_ = scan_pos_;
    }
    return 0;
  }

  static int parse_request_line(std::string_view line, Request& r) {
    std::size_t sp1 = line.find(' ');
    if (sp1 == std::string_view::npos) return 400;
    std::size_t sp2 = line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos) return 400;
    r.method = line.substr(0, sp1);
    r.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    std::string_view v = line.substr(sp2 + 1);
    if (!is_token(r.method) || r.target.empty()) return 400;
    for (char c : r.target)
      if (c == ' ' || is_ctl(static_cast<unsigned char>(c))) return 400;
    auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (v.size() != 8 || v.substr(0, 5) != "HTTP/" || !digit(v[5]) || v[6] != '.' || !digit(v[7]))
      return 400;  // also catches a third SP: it lands in v
    if (v[5] != '1') return 505;
    r.version_minor = v[7] == '0' ? 0 : 1;
    return 0;
  }

  // Parses in[head_begin_, head_end_) into req_ (views into `in`) and sets body_len_.
  // Returns 0 or an error status.
  int parse_head(std::string_view in) {
    req_ = Request{};
    std::size_t n_headers = 0;
    int hosts = 0;
    bool have_length = false, conn_close = false, conn_keep_alive = false;
    bool expect_continue = false;
    std::uint64_t length = 0;
    std::size_t pos = head_begin_;
    bool first = true;
    for (;;) {
      std::size_t lf = in.find('\n', pos);  // found: the scan saw the head's end
      if (lf >= head_end_) return 400;      // only if the caller changed the bytes
      std::size_t end = (lf > pos && in[lf - 1] == '\r') ? lf - 1 : lf;
      std::string_view line = in.substr(pos, end - pos);
      pos = lf + 1;
      if (line.empty()) break;  // the empty line ending the head
      if (first) {
        first = false;
        if (int st = parse_request_line(line, req_); st != 0) return st;
        continue;
      }
      std::size_t colon = line.find(':');
      if (colon == std::string_view::npos) return 400;
      std::string_view name = line.substr(0, colon);
      if (!is_token(name)) return 400;  // empty, obs-fold, whitespace before the colon
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && is_ows(value.front())) value.remove_prefix(1);
      while (!value.empty() && is_ows(value.back())) value.remove_suffix(1);
      for (char c : value)
        if (c != '\t' && is_ctl(static_cast<unsigned char>(c))) return 400;
      if (n_headers == kMaxHeaders) return 431;
      headers_[n_headers++] = Header{name, value};

      if (iequals(name, "content-length")) {
        std::uint64_t v = 0;
        if (value.empty()) return 400;
        for (char c : value) {
          if (c < '0' || c > '9') return 400;         // also a comma list: "5, 5"
          if (v > (UINT64_MAX - 9) / 10) return 400;  // overflows 64 bits (Go: ParseUint)
          v = v * 10 + static_cast<std::uint64_t>(c - '0');
        }
        if (have_length && v != length) return 400;
        have_length = true;
        length = v;
      } else if (iequals(name, "transfer-encoding")) {
        return 501;
      } else if (iequals(name, "host")) {
        hosts++;
      } else if (iequals(name, "connection")) {
        for_each_token(value, [&](std::string_view t) {
          if (iequals(t, "close")) conn_close = true;
          if (iequals(t, "keep-alive")) conn_keep_alive = true;
        });
      } else if (iequals(name, "expect")) {
        if (iequals(value, "100-continue")) expect_continue = true;
      }
    }
    if (req_.version_minor == 1 && hosts != 1) return 400;
    if (hosts > 1) return 400;
    if (length > kMaxBody) return 413;
    req_.headers = std::span<const Header>(headers_.data(), n_headers);
    req_.content_length = length;
    req_.keep_alive = req_.version_minor == 1 ? !conn_close : conn_keep_alive && !conn_close;
    req_.expect_continue = req_.version_minor == 1 && expect_continue;
    body_len_ = static_cast<std::size_t>(length);
    return 0;
  }

  // Calls f on each non-empty element of a comma-separated list, trimmed of SP/HTAB.
  template <class F>
  static void for_each_token(std::string_view list, F&& f) {
    while (!list.empty()) {
      std::size_t comma = list.find(',');
      std::string_view t = list.substr(0, comma);
      list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
      while (!t.empty() && is_ows(t.front())) t.remove_prefix(1);
      while (!t.empty() && is_ows(t.back())) t.remove_suffix(1);
      if (!t.empty()) f(t);
    }
  }

  // Scan state of the current request: offsets into `in`, so the bytes may move.
  std::size_t scan_pos_ = 0;    // in[0, scan_pos_) scanned: no end of head there
  std::size_t line_begin_ = 0;  // first byte of the line being scanned
  std::size_t head_begin_ = 0;  // first byte of the request line (after empty lines)
  std::size_t head_end_ = 0;    // 0, or the head's length with its empty line (parsed)
  std::size_t body_len_ = 0;    // Content-Length, once the head is parsed
  bool in_head_ = false;        // the request line has been seen
  int error_ = 0;               // the sticky error status, 0 if none

  Request req_;
  std::array<Header, kMaxHeaders> headers_;
};

}  // namespace http
