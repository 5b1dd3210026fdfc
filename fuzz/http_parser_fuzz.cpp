// fuzz/http_parser_fuzz.cpp — libFuzzer target for examples/http_parser.hpp. Built and run
// by `make fuzz` (clang++ -fsanitize=fuzzer,address,undefined; build/fuzz/); not part of
// `make test`.
//
// The input is a byte stream as a client might send it: zero or more pipelined requests.
// It is parsed three ways, as a server would (parse, on kComplete drop `consumed` bytes and
// parse the rest, stop at the first kNeedMore or kError):
//   1. all at once;
//   2. one byte appended per call;
//   3. in chunks whose sizes come from a generator seeded by the input.
// Invariants checked (a violation aborts, which libFuzzer reports with the input):
// - the parser never reads past the bytes it is given: ASan, with the bytes not yet "sent"
//   poisoned in (2) and every chunk's view copied to storage of exactly its size in (3);
// - kComplete: consumed <= the bytes given, and > 0; body.size() == content_length; every
//   view (method, target, header names and values, body) lies inside those bytes; the
//   consumed bytes alone parse to the same request (a request is self-delimiting);
// - in (2) a request completes on the byte that ends it: consumed == the bytes given;
// - the three ways give the same sequence of outcomes, requests and final status.
// Why here and not in tests/fuzz/: the Makefile globs tests/*/*.cpp into corun-tests, and
// this file has libFuzzer's entry point instead of doctest cases; a directory of its own
// keeps that glob as it is.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../examples/http_parser.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define FUZZ_ASAN 1
#endif
#endif
#ifndef FUZZ_ASAN
#define FUZZ_ASAN 0
#endif

namespace {

#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

// One parse answer, with the request copied out (its views die with the buffer).
struct Event {
  http::Outcome outcome;
  std::size_t consumed;
  int status;
  std::string method, target, body;
  std::vector<std::string> fields;  // name, value, name, value, ...
  int minor;
  bool keep_alive, expect_continue;
  std::uint64_t content_length;
  bool operator==(const Event&) const = default;
};

bool inside(std::string_view part, std::string_view whole) {
  if (part.empty()) return true;
  return part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size();
}

Event record(const http::RequestParser& p, http::Result r, std::string_view in) {
  Event e{r.outcome, r.consumed, r.status, {}, {}, {}, {}, -1, false, false, 0};
  if (r.outcome == http::Outcome::kError) {
    FUZZ_CHECK(r.status == 400 || r.status == 413 || r.status == 431 || r.status == 501 ||
               r.status == 505);
    return e;
  }
  if (r.outcome != http::Outcome::kComplete) {
    FUZZ_CHECK(r.consumed == 0 && r.status == 0);
    return e;
  }
  FUZZ_CHECK(r.consumed > 0 && r.consumed <= in.size());
  const http::Request& q = p.request();
  std::string_view mine = in.substr(0, r.consumed);
  FUZZ_CHECK(inside(q.method, mine) && inside(q.target, mine) && inside(q.body, mine));
  FUZZ_CHECK(!q.method.empty() && !q.target.empty());
  FUZZ_CHECK(q.body.size() == q.content_length);
  FUZZ_CHECK(q.content_length <= http::RequestParser::kMaxBody);
  FUZZ_CHECK(q.headers.size() <= http::RequestParser::kMaxHeaders);
  FUZZ_CHECK(q.version_minor == 0 || q.version_minor == 1);
  e.method = q.method;
  e.target = q.target;
  e.body = q.body;
  for (const http::Header& h : q.headers) {
    FUZZ_CHECK(inside(h.name, mine) && inside(h.value, mine) && !h.name.empty());
    e.fields.emplace_back(h.name);
    e.fields.emplace_back(h.value);
  }
  e.minor = q.version_minor;
  e.keep_alive = q.keep_alive;
  e.expect_continue = q.expect_continue;
  e.content_length = q.content_length;
  return e;
}

// The request's bytes alone, in storage of exactly their size, parse to the same request.
void check_self_delimiting(std::string_view in, const Event& e) {
  std::unique_ptr<char[]> copy(new char[e.consumed]);
  std::memcpy(copy.get(), in.data(), e.consumed);
  std::string_view alone(copy.get(), e.consumed);
  http::RequestParser p;
  http::Result r = p.parse(alone);
  FUZZ_CHECK(record(p, r, alone) == e);
}

// (1) All at once: `data` is libFuzzer's copy, exactly `size` bytes.
std::vector<Event> parse_all(std::string_view data) {
  std::vector<Event> out;
  http::RequestParser p;
  std::string_view rest = data;
  for (;;) {
    http::Result r = p.parse(rest);
    out.push_back(record(p, r, rest));
    if (r.outcome != http::Outcome::kComplete) return out;
    check_self_delimiting(rest, out.back());
    rest.remove_prefix(r.consumed);
  }
}

// (2) One byte per call, the bytes not yet given poisoned (ASan) so a read past them is a
// report. `buf` holds all the bytes; the parser sees buf[start, end).
std::vector<Event> parse_bytewise(std::string_view data) {
  std::vector<Event> out;
  if (data.empty()) return out;
  std::unique_ptr<char[]> buf(new char[data.size()]);
  std::memcpy(buf.get(), data.data(), data.size());
  http::RequestParser p;
  std::size_t start = 0;
  for (std::size_t end = 1; end <= data.size(); end++) {
#if FUZZ_ASAN
    ASAN_POISON_MEMORY_REGION(buf.get() + end, data.size() - end);
#endif
    std::string_view in(buf.get() + start, end - start);
    http::Result r = p.parse(in);
#if FUZZ_ASAN
    ASAN_UNPOISON_MEMORY_REGION(buf.get() + end, data.size() - end);
#endif
    if (r.outcome == http::Outcome::kNeedMore) continue;
    out.push_back(record(p, r, in));
    if (r.outcome == http::Outcome::kError) return out;
    FUZZ_CHECK(r.consumed == in.size());  // complete on its last byte, not later
    start = end;
  }
  http::Result r = p.parse(std::string_view(buf.get() + start, data.size() - start));
  FUZZ_CHECK(r.outcome == http::Outcome::kNeedMore);
  out.push_back(record(p, r, {}));
  return out;
}

// (3) Chunks of 1..64 bytes (sizes from an LCG seeded by the input); each call's bytes are
// copied to storage of exactly their size, so they also move between calls.
std::vector<Event> parse_chunked(std::string_view data) {
  std::vector<Event> out;
  std::uint32_t seed = 2166136261u;
  for (unsigned char c : data.substr(0, 16)) seed = (seed ^ c) * 16777619u;
  http::RequestParser p;
  std::string pending;  // the current request's bytes so far
  std::size_t next = 0;
  for (;;) {
    std::size_t take = 0;
    if (next < data.size()) {
      seed = seed * 1664525u + 1013904223u;
      take = std::min<std::size_t>(1 + (seed >> 26), data.size() - next);
    }
    pending.append(data.substr(next, take));
    next += take;
    // Parse what is pending until it needs more (pipelined requests in one chunk).
    for (;;) {
      std::unique_ptr<char[]> copy(new char[pending.size() + 1]);  // +1: never 0 bytes
      std::memcpy(copy.get(), pending.data(), pending.size());
      std::string_view in(copy.get(), pending.size());
      http::Result r = p.parse(in);
      if (r.outcome == http::Outcome::kNeedMore) {
        if (next == data.size()) {
          out.push_back(record(p, r, in));
          return out;
        }
        break;
      }
      out.push_back(record(p, r, in));
      if (r.outcome == http::Outcome::kError) return out;
      pending.erase(0, r.consumed);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<Event> all = parse_all(in);
  FUZZ_CHECK(!all.empty() && all.back().outcome != http::Outcome::kComplete);
  if (size > 0) FUZZ_CHECK(parse_bytewise(in) == all);
  FUZZ_CHECK(parse_chunked(in) == all);
  return 0;
}
