// sched/config.cpp — parsing and validating the CORUN_* variables (contract: config.hpp).
//
// Structure: kVars is the one table. Each row is the documentation (VarDoc) and the
// function that parses a non-empty value into Settings; known_variables() is derived from
// it, so the docs and the parser cannot disagree about which names exist or what they
// accept. Parsers throw through bad(), which prints the row's "accepted" text verbatim.
//
// Look-alike names in another case (corun_procs) are warned about, not rejected (another
// program may own them); g_warned remembers which were, so each prints once per process
// however many runs there are.
//
// Rejected: a std::map<name, parser> (loses the documented order, which is also the
// deterministic error order); regex validation (slow to compile, obscures the ranges);
// treating a look-alike as its CORUN_ name (one spelling per name, as for values).
#include "sched/config.hpp"

#include <unistd.h>  // environ (declared under _GNU_SOURCE, which g++/clang++ define)

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>

#include "base/lock.hpp"

namespace corun::sched {
namespace {

constexpr std::string_view kPrefix = "CORUN_";

// Renders bytes from the environment safely in a message: printable ASCII as is, except
// '"' and '\\' which are escaped; everything else as \xNN.
std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

std::string quoted(std::string_view s) {
  return "\"" + escape(s) + "\"";
}

// NAME="value": detail
[[noreturn]] void fail(const VarDoc& doc, std::string_view value, std::string_view detail) {
  std::string msg = doc.name;
  msg += '=';
  msg += quoted(value);
  msg += ": ";
  msg += detail;
  throw std::invalid_argument(msg);
}

// NAME="value": expected <accepted>
[[noreturn]] void bad(const VarDoc& doc, std::string_view value) {
  fail(doc, value, std::string("expected ") + doc.accepted);
}

// Decimal digits only (no sign, space, base prefix or suffix), at least one, no overflow,
// within [lo, hi]. Leading zeros are allowed and do not mean octal ("08" is 8).
std::optional<std::uint64_t> parse_number(std::string_view s, std::uint64_t lo, std::uint64_t hi) {
  if (s.empty()) return std::nullopt;
  std::uint64_t v = 0;
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (kMax - d) / 10) return std::nullopt;  // v*10+d would overflow
    v = v * 10 + d;
  }
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

std::uint64_t number(const VarDoc& doc, std::string_view value, std::uint64_t lo,
                     std::uint64_t hi) {
  auto v = parse_number(value, lo, hi);
  if (!v) bad(doc, value);
  return *v;
}

// Two-word switch: returns true for `yes`, false for `no`, else throws.
bool word(const VarDoc& doc, std::string_view value, std::string_view yes, std::string_view no) {
  if (value == yes) return true;
  if (value == no) return false;
  bad(doc, value);
}

constexpr std::uint64_t kBackoffMax = 1000000;
constexpr std::uint64_t kSchedtraceMax = 3600000;

void parse_backoff(Settings& s, const VarDoc& doc, std::string_view v) {
  if (v == "yield") {
    s.runnext_backoff = Backoff{BackoffKind::yield, 0};
    return;
  }
  const auto colon = v.find(':');
  if (colon == std::string_view::npos) bad(doc, v);
  const std::string_view kind = v.substr(0, colon);
  BackoffKind k;
  if (kind == "spin") {
    k = BackoffKind::spin;
  } else if (kind == "usleep") {
    k = BackoffKind::usleep;
  } else {
    bad(doc, v);
  }
  auto amount = parse_number(v.substr(colon + 1), 0, kBackoffMax);
  if (!amount) bad(doc, v);
  s.runnext_backoff = Backoff{k, *amount};
}

// CORUN_DEBUG: comma list of key=value; the keys and their values are those its row's
// `accepted` text lists (schedtrace=MS, stealorder=0|1).
void parse_debug(Settings& s, const VarDoc& doc, std::string_view v) {
  const std::string expected = std::string("expected ") + doc.accepted;
  bool seen_schedtrace = false, seen_stealorder = false;
  std::size_t pos = 0;
  for (;;) {
    const auto comma = v.find(',', pos);
    const std::string_view item =
        v.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (item.empty()) fail(doc, v, "empty item; " + expected);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos)
      fail(doc, v, "item " + quoted(item) + " is not key=value; " + expected);
    const std::string_view key = item.substr(0, eq), val = item.substr(eq + 1);
    if (key == "schedtrace") {
      if (seen_schedtrace) fail(doc, v, "key \"schedtrace\" given twice; " + expected);
      seen_schedtrace = true;
      auto ms = parse_number(val, 1, kSchedtraceMax);
      if (!ms)
        fail(doc, v, "schedtrace=" + quoted(val) + ": expected a whole number from 1 to 3600000");
      s.schedtrace_ms = *ms;
    } else if (key == "stealorder") {
      if (seen_stealorder) fail(doc, v, "key \"stealorder\" given twice; " + expected);
      seen_stealorder = true;
      if (val == "1") {
        s.debug_stealorder = true;
      } else if (val == "0") {
        s.debug_stealorder = false;
      } else {
        fail(doc, v, "stealorder=" + quoted(val) + ": expected 0 or 1");
      }
    } else {
      fail(doc, v,
           "unknown key " + quoted(key) + "; known keys: schedtrace, stealorder; " + expected);
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
}

using Parse = void (*)(Settings&, const VarDoc&, std::string_view value);  // value non-empty

struct Var {
  VarDoc doc;
  Parse parse;
};

// The table. Order = DESIGN.md's table = error-report order. Ranges in `accepted` and in
// the parse lambdas must agree; tests check both ends of every range.
const Var kVars[] = {
    {{"CORUN_PROCS", "hardware threads in the affinity mask", "a whole number from 1 to 4096",
      "number of Ps"},
     [](Settings& s, const VarDoc& d, std::string_view v) {
       s.procs = static_cast<int>(number(d, v, 1, 4096));
     }},
    {{"CORUN_PIN", "on", "on or off", "on: pin each P's thread to its own CPU; off: do not pin"},
     [](Settings& s, const VarDoc& d, std::string_view v) { s.pin = word(d, v, "on", "off"); }},
    {{"CORUN_NUMA", "auto", "auto or off",
      "auto: steal nearest-first and place memory on the P's node; off: ignore topology"},
     [](Settings& s, const VarDoc& d, std::string_view v) { s.numa = word(d, v, "auto", "off"); }},
    {{"CORUN_RUNNEXT_BACKOFF", "spin:3000",
      "spin:NS (NS a whole number from 0 to 1000000), usleep:US (US a whole number from 0 to "
      "1000000) or yield",
      "how a thief waits before stealing a running P's runnext: spin:NS (pause loop), "
      "usleep:US (Go's old 100 / new 3), yield"},
     parse_backoff},
    {{"CORUN_TIMERS", "per-p", "per-p or global",
      "per-p: a timer heap per P; global: one heap, one lock (Go before CL 34784)"},
     [](Settings& s, const VarDoc& d, std::string_view v) {
       s.timers = word(d, v, "per-p", "global") ? TimerMode::per_p : TimerMode::global;
     }},
    {{"CORUN_TIMERSLACK_NS", "1000", "a whole number from 1 to 1000000000",
      "timer slack of the runtime's threads in ns (prctl PR_SET_TIMERSLACK)"},
     [](Settings& s, const VarDoc& d, std::string_view v) {
       s.timerslack_ns = number(d, v, 1, 1000000000);
     }},
    {{"CORUN_TIMER_SPIN", "auto", "auto or off",
      "auto: the runtime measures how late the kernel wakes it and, for a deadline nearer "
      "than that, spins instead, waking that much early for farther ones; off: sleep to the "
      "deadline (spin only for the last 10 us)"},
     [](Settings& s, const VarDoc& d, std::string_view v) {
       s.timer_spin_auto = word(d, v, "auto", "off");
     }},
    {{"CORUN_TIMER_SPIN_NS", "0", "a whole number from 0 to 10000000",
      "a fixed early wake in ns before a deadline, spinning the rest, and the spin window "
      "(at least 10000; replaces the measured ones); 0: as CORUN_TIMER_SPIN says"},
     [](Settings& s, const VarDoc& d, std::string_view v) {
       s.timer_spin_ns = number(d, v, 0, 10000000);
     }},
    {{"CORUN_NETPOLL_WAIT", "pwait2", "pwait2 or timerfd",
      "how the idle poller waits for a deadline: pwait2 (epoll_pwait2, ns timeout; "
      "falls back to timerfd before Linux 5.11) or timerfd (a timerfd in the epoll set)"},
     [](Settings& s, const VarDoc& d, std::string_view v) {
       s.netpoll_timerfd = !word(d, v, "pwait2", "timerfd");
     }},
    {{"CORUN_POOL", "sharded", "sharded or global",
      "sharded: per-P pool caches; global: one lock-protected list (Go before CL 46010043)"},
     [](Settings& s, const VarDoc& d, std::string_view v) {
       s.pool = word(d, v, "sharded", "global") ? PoolMode::sharded : PoolMode::global;
     }},
    {{"CORUN_POOL_TRIM_MS", "5000", "a whole number from 1 to 3600000",
      "pool victim rotation period in ms"},
     [](Settings& s, const VarDoc& d, std::string_view v) {
       s.pool_trim_ms = number(d, v, 1, 3600000);
     }},
    {{"CORUN_STACK_KB", "64", "a whole number from 16 to 65536 that is a multiple of 4",
      "task stack size in KiB (default larger under sanitizers)"},
     [](Settings& s, const VarDoc& d, std::string_view v) {
       const auto kb = number(d, v, 16, 65536);
       if (kb % 4 != 0) bad(d, v);
       s.stack_kb = static_cast<std::size_t>(kb);
     }},
    {{"CORUN_DEBUG", "(empty)",
      "a comma list of key=value items; keys: schedtrace=MS (MS a whole number from 1 to "
      "3600000), stealorder=0|1",
      "debug output: schedtrace=MS prints a per-P state line every MS ms; stealorder=1 prints "
      "the topology steal plan at start"},
     parse_debug},
};

const Var* find(std::string_view name) {
  for (const Var& v : kVars)
    if (name == v.doc.name) return &v;
  return nullptr;
}

// Levenshtein distance ignoring ASCII case, for "did you mean" (so CORUN_procs suggests
// CORUN_PROCS; the name itself is still matched case-sensitively). Short names: O(n*m).
std::size_t distance(std::string_view a, std::string_view b) {
  auto up = [](char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; };
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] =
          std::min({row[j] + 1, row[j - 1] + 1, diag + (up(a[i - 1]) == up(b[j - 1]) ? 0 : 1)});
      diag = above;
    }
  }
  return row[b.size()];
}

[[noreturn]] void unknown(std::string_view name) {
  std::string msg = escape(name) + ": unknown variable; known: ";
  const Var* best = nullptr;
  std::size_t best_d = 3;  // suggest only within distance 2
  bool first = true;
  for (const Var& v : kVars) {
    if (!first) msg += ", ";
    first = false;
    msg += v.doc.name;
    const std::size_t d = distance(name, v.doc.name);
    if (d < best_d) {
      best = &v;
      best_d = d;
    }
  }
  if (best) msg += std::string("; did you mean ") + best->doc.name + "?";
  throw std::invalid_argument(msg);
}

char upper(char c) {
  return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
}

// Not "CORUN_" exactly, but "CORUN_" ignoring ASCII case.
bool lookalike(std::string_view name) {
  if (name.size() < kPrefix.size() || name.starts_with(kPrefix)) return false;
  for (std::size_t i = 0; i < kPrefix.size(); ++i)
    if (upper(name[i]) != kPrefix[i]) return false;
  return true;
}

// Names already warned about in this process (each is printed once).
base::Lock<base::LockRank::config> g_warned_mu;
std::set<std::string> g_warned CORUN_GUARDED_BY(g_warned_mu);

}  // namespace

std::vector<std::string> lookalike_warnings(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  std::set<std::string_view> seen;
  for (const std::string& name : names) {
    if (!lookalike(name) || !seen.insert(name).second) continue;
    std::string line =
        "corun: environment variable " + escape(name) + " ignored: names are case-sensitive";
    // The nearest known name ignoring case (distance() ignores it), within 2 edits.
    const Var* best = nullptr;
    std::size_t best_d = 3;
    for (const Var& v : kVars) {
      const std::size_t d = distance(name, v.doc.name);
      if (d < best_d) {
        best = &v;
        best_d = d;
      }
    }
    if (best) {
      line += std::string("; did you mean ") + best->doc.name + "?";
    } else {
      line += "; corun reads only upper-case CORUN_* names (see the README's tuning table)";
    }
    out.push_back(std::move(line));
  }
  return out;
}

const std::vector<VarDoc>& known_variables() {
  static const std::vector<VarDoc> docs = [] {
    std::vector<VarDoc> d;
    for (const Var& v : kVars) d.push_back(v.doc);
    return d;
  }();
  return docs;
}

Settings parse_settings(const std::vector<std::pair<std::string, std::string>>& vars) {
  // 1. Unknown names, alphabetically first: deterministic whatever environ's order.
  const std::string* first_unknown = nullptr;
  for (const auto& [name, value] : vars)
    if (!find(name) && (!first_unknown || name < *first_unknown)) first_unknown = &name;
  if (first_unknown) unknown(*first_unknown);

  // 2. Known variables in table order; the first bad one throws.
  Settings s;
  for (const Var& var : kVars) {
    const std::string* value = nullptr;
    for (const auto& [name, v] : vars) {
      if (name != var.doc.name) continue;
      if (value)
        throw std::invalid_argument(std::string(var.doc.name) + ": set more than once (" +
                                    quoted(*value) + " and " + quoted(v) + "); set it once");
      value = &v;
    }
    if (value && !value->empty()) var.parse(s, var.doc, *value);
  }
  return s;
}

Settings settings_from_environment() {
  std::vector<std::pair<std::string, std::string>> vars;
  std::vector<std::string> lookalikes;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with(kPrefix)) {
      const std::string_view name = entry.substr(0, entry.find('='));
      if (lookalike(name)) lookalikes.emplace_back(name);
      continue;
    }
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) {
      vars.emplace_back(std::string(entry), std::string());  // malformed entry: no value
    } else {
      vars.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
    }
  }
  if (!lookalikes.empty()) {
    std::vector<std::string> fresh;  // not warned about yet in this process
    {
      base::Guard g(g_warned_mu);
      for (std::string& name : lookalikes)
        if (g_warned.insert(name).second) fresh.push_back(std::move(name));
    }
    for (const std::string& line : lookalike_warnings(fresh))
      std::fprintf(stderr, "%s\n", line.c_str());
  }
  return parse_settings(vars);
}

std::string format_backoff(const Backoff& b) {
  switch (b.kind) {
    case BackoffKind::spin:
      return "spin:" + std::to_string(b.amount);
    case BackoffKind::usleep:
      return "usleep:" + std::to_string(b.amount);
    case BackoffKind::yield:
      return "yield";
  }
  return "?";  // unreachable for valid enum values
}

std::string describe(const Settings& s) {
  std::string out;
  out += "procs=" + (s.procs == 0 ? std::string("default") : std::to_string(s.procs));
  out += s.pin ? " pin=on" : " pin=off";
  out += s.numa ? " numa=auto" : " numa=off";
  out += " runnext_backoff=" + format_backoff(s.runnext_backoff);
  out += s.timers == TimerMode::per_p ? " timers=per-p" : " timers=global";
  out += " timerslack_ns=" + std::to_string(s.timerslack_ns);
  out += s.timer_spin_auto ? " timer_spin=auto" : " timer_spin=off";
  out += " timer_spin_ns=" + std::to_string(s.timer_spin_ns);
  out += s.netpoll_timerfd ? " netpoll_wait=timerfd" : " netpoll_wait=pwait2";
  out += s.pool == PoolMode::sharded ? " pool=sharded" : " pool=global";
  out += " pool_trim_ms=" + std::to_string(s.pool_trim_ms);
  out += " stack_kb=" + (s.stack_kb == 0 ? std::string("default") : std::to_string(s.stack_kb));
  out += " schedtrace_ms=" +
         (s.schedtrace_ms == 0 ? std::string("off") : std::to_string(s.schedtrace_ms));
  out += s.debug_stealorder ? " stealorder=1" : " stealorder=0";
  return out;
}

}  // namespace corun::sched
