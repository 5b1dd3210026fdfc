// tests/sched/config_test.cpp — CORUN_* parsing: defaults, every accepted form, every error path
// (message names the variable, the value and the accepted form), unknown names, empty =
// unset, overflow, the docs table matching the parser, and reading the real environment.
//
// The environment test saves every CORUN_* variable the test run inherited (the suite may
// itself be run under, e.g., CORUN_PROCS=2), clears them, and restores them afterwards.
// Look-alike names in another case (corun_procs) are tested through lookalike_warnings,
// and once in a child process (the warning goes to stderr once per process).
#include "sched/config.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support.hpp"

namespace {

using corun::sched::Backoff;
using corun::sched::BackoffKind;
using corun::sched::known_variables;
using corun::sched::parse_settings;
using corun::sched::PoolMode;
using corun::sched::Settings;
using corun::sched::TimerMode;
using Vars = std::vector<std::pair<std::string, std::string>>;

// The message of the std::invalid_argument parse_settings throws; "" if it does not throw.
std::string error_of(const Vars& vars) {
  try {
    (void)parse_settings(vars);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

Settings one(const char* name, const char* value) {
  return parse_settings({{name, value}});
}

const char* accepted_of(const std::string& name) {
  for (const auto& d : known_variables())
    if (name == d.name) return d.accepted;
  return nullptr;
}

const std::vector<std::string> kExpectedNames = {
    "CORUN_PROCS",        "CORUN_PIN",           "CORUN_NUMA",         "CORUN_RUNNEXT_BACKOFF",
    "CORUN_TIMERS",       "CORUN_TIMERSLACK_NS", "CORUN_TIMER_SPIN",   "CORUN_TIMER_SPIN_NS",
    "CORUN_NETPOLL_WAIT", "CORUN_POOL",          "CORUN_POOL_TRIM_MS", "CORUN_STACK_KB",
    "CORUN_DEBUG",
};

// Saves all CORUN_* variables, clears them; the destructor clears and restores them.
class EnvGuard {
 public:
  EnvGuard() {
    saved_ = corun_entries();
    clear();
  }
  ~EnvGuard() {
    clear();
    for (const auto& [n, v] : saved_) setenv(n.c_str(), v.c_str(), 1);
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  static Vars corun_entries() {
    Vars out;
    for (char** e = environ; e && *e; ++e) {
      std::string entry(*e);
      if (entry.rfind("CORUN_", 0) != 0) continue;
      const auto eq = entry.find('=');
      if (eq == std::string::npos) continue;
      out.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
    }
    return out;
  }
  static void clear() {
    for (const auto& [n, v] : corun_entries()) unsetenv(n.c_str());
  }
  Vars saved_;
};

size_t occurrences(const std::string& s, const std::string& sub) {
  size_t n = 0;
  for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + 1)) ++n;
  return n;
}

}  // namespace

// Two runs with look-alike names in the environment: both start; each name warned once.
CORUN_TEST_CHILD(config_lookalikes) {
  int ran = 0;
  for (int k = 0; k < 2; ++k) corun::test::run([&] { ++ran; }, 1);
  std::printf("runs: %d\n", ran);
  return 0;
}

TEST_SUITE("unit.config") {
  TEST_CASE("nothing set gives every documented default") {
    const Settings s = parse_settings({});
    CHECK(s == Settings{});
    CHECK(s.procs == 0);
    CHECK(s.pin);
    CHECK(s.numa);
    CHECK(s.runnext_backoff.kind == BackoffKind::spin);
    CHECK(s.runnext_backoff.amount == 3000);
    CHECK(s.timers == TimerMode::per_p);
    CHECK(s.timerslack_ns == 1000);
    CHECK(s.timer_spin_ns == 0);
    CHECK(s.pool == PoolMode::sharded);
    CHECK(s.pool_trim_ms == 5000);
    CHECK(s.stack_kb == 0);
    CHECK(s.schedtrace_ms == 0);
    CHECK_FALSE(s.debug_stealorder);
  }

  TEST_CASE("an empty value means unset, for every known variable") {
    for (const auto& d : known_variables()) {
      INFO(d.name);
      CHECK(one(d.name, "") == Settings{});
    }
    Vars all;
    for (const auto& d : known_variables()) all.emplace_back(d.name, "");
    CHECK(parse_settings(all) == Settings{});
  }

  TEST_CASE("documented default spellings parse to the defaults") {
    CHECK(one("CORUN_PIN", "on") == Settings{});
    CHECK(one("CORUN_NUMA", "auto") == Settings{});
    CHECK(one("CORUN_RUNNEXT_BACKOFF", "spin:3000") == Settings{});
    CHECK(one("CORUN_TIMERS", "per-p") == Settings{});
    CHECK(one("CORUN_TIMERSLACK_NS", "1000") == Settings{});
    CHECK(one("CORUN_TIMER_SPIN", "auto") == Settings{});
    CHECK(one("CORUN_TIMER_SPIN_NS", "0") == Settings{});
    CHECK(one("CORUN_NETPOLL_WAIT", "pwait2") == Settings{});
    CHECK(one("CORUN_POOL", "sharded") == Settings{});
    CHECK(one("CORUN_POOL_TRIM_MS", "5000") == Settings{});
  }

  TEST_CASE("every accepted form") {
    SUBCASE("CORUN_NETPOLL_WAIT") {
      CHECK(one("CORUN_NETPOLL_WAIT", "timerfd").netpoll_timerfd);
      CHECK(!one("CORUN_NETPOLL_WAIT", "pwait2").netpoll_timerfd);
    }
    SUBCASE("CORUN_PROCS") {
      CHECK(one("CORUN_PROCS", "1").procs == 1);
      CHECK(one("CORUN_PROCS", "2").procs == 2);
      CHECK(one("CORUN_PROCS", "4096").procs == 4096);
      CHECK(one("CORUN_PROCS", "08").procs == 8);  // leading zero is not octal
    }
    SUBCASE("CORUN_PIN / CORUN_NUMA") {
      CHECK(one("CORUN_PIN", "on").pin);
      CHECK_FALSE(one("CORUN_PIN", "off").pin);
      CHECK(one("CORUN_NUMA", "auto").numa);
      CHECK_FALSE(one("CORUN_NUMA", "off").numa);
    }
    SUBCASE("CORUN_RUNNEXT_BACKOFF") {
      CHECK(one("CORUN_RUNNEXT_BACKOFF", "spin:0").runnext_backoff ==
            Backoff{BackoffKind::spin, 0});
      CHECK(one("CORUN_RUNNEXT_BACKOFF", "spin:1000000").runnext_backoff ==
            Backoff{BackoffKind::spin, 1000000});
      CHECK(one("CORUN_RUNNEXT_BACKOFF", "usleep:3").runnext_backoff ==
            Backoff{BackoffKind::usleep, 3});
      CHECK(one("CORUN_RUNNEXT_BACKOFF", "usleep:100").runnext_backoff ==
            Backoff{BackoffKind::usleep, 100});
      CHECK(one("CORUN_RUNNEXT_BACKOFF", "usleep:0").runnext_backoff ==
            Backoff{BackoffKind::usleep, 0});
      CHECK(one("CORUN_RUNNEXT_BACKOFF", "usleep:1000000").runnext_backoff ==
            Backoff{BackoffKind::usleep, 1000000});
      CHECK(one("CORUN_RUNNEXT_BACKOFF", "yield").runnext_backoff.kind == BackoffKind::yield);
    }
    SUBCASE("CORUN_TIMERS / CORUN_POOL") {
      CHECK(one("CORUN_TIMERS", "per-p").timers == TimerMode::per_p);
      CHECK(one("CORUN_TIMERS", "global").timers == TimerMode::global);
      CHECK(one("CORUN_POOL", "sharded").pool == PoolMode::sharded);
      CHECK(one("CORUN_POOL", "global").pool == PoolMode::global);
      CHECK(one("CORUN_TIMER_SPIN", "auto").timer_spin_auto);
      CHECK_FALSE(one("CORUN_TIMER_SPIN", "off").timer_spin_auto);
    }
    SUBCASE("numeric ranges, both ends") {
      CHECK(one("CORUN_TIMERSLACK_NS", "1").timerslack_ns == 1);
      CHECK(one("CORUN_TIMERSLACK_NS", "1000000000").timerslack_ns == 1000000000);
      CHECK(one("CORUN_TIMER_SPIN_NS", "0").timer_spin_ns == 0);
      CHECK(one("CORUN_TIMER_SPIN_NS", "10000000").timer_spin_ns == 10000000);
      CHECK(one("CORUN_POOL_TRIM_MS", "1").pool_trim_ms == 1);
      CHECK(one("CORUN_POOL_TRIM_MS", "3600000").pool_trim_ms == 3600000);
      CHECK(one("CORUN_STACK_KB", "16").stack_kb == 16);
      CHECK(one("CORUN_STACK_KB", "64").stack_kb == 64);
      CHECK(one("CORUN_STACK_KB", "20").stack_kb == 20);
      CHECK(one("CORUN_STACK_KB", "65536").stack_kb == 65536);
    }
    SUBCASE("CORUN_DEBUG") {
      CHECK(one("CORUN_DEBUG", "schedtrace=1000").schedtrace_ms == 1000);
      CHECK(one("CORUN_DEBUG", "schedtrace=1").schedtrace_ms == 1);
      CHECK(one("CORUN_DEBUG", "schedtrace=3600000").schedtrace_ms == 3600000);
      CHECK(one("CORUN_DEBUG", "stealorder=1").debug_stealorder);
      CHECK_FALSE(one("CORUN_DEBUG", "stealorder=0").debug_stealorder);
      for (const char* v : {"schedtrace=250,stealorder=1", "stealorder=1,schedtrace=250"}) {
        INFO(v);
        const Settings s = one("CORUN_DEBUG", v);
        CHECK(s.schedtrace_ms == 250);
        CHECK(s.debug_stealorder);
      }
    }
    SUBCASE("all at once") {
      const Settings s = parse_settings({{"CORUN_DEBUG", "schedtrace=10,stealorder=1"},
                                         {"CORUN_STACK_KB", "128"},
                                         {"CORUN_POOL_TRIM_MS", "100"},
                                         {"CORUN_POOL", "global"},
                                         {"CORUN_NETPOLL_WAIT", "timerfd"},
                                         {"CORUN_TIMER_SPIN_NS", "20000"},
                                         {"CORUN_TIMER_SPIN", "off"},
                                         {"CORUN_TIMERSLACK_NS", "1"},
                                         {"CORUN_TIMERS", "global"},
                                         {"CORUN_RUNNEXT_BACKOFF", "usleep:100"},
                                         {"CORUN_NUMA", "off"},
                                         {"CORUN_PIN", "off"},
                                         {"CORUN_PROCS", "3"}});
      CHECK(corun::sched::describe(s) ==
            "procs=3 pin=off numa=off runnext_backoff=usleep:100 timers=global timerslack_ns=1 "
            "timer_spin=off timer_spin_ns=20000 netpoll_wait=timerfd pool=global pool_trim_ms=100 "
            "stack_kb=128 "
            "schedtrace_ms=10 stealorder=1");
    }
  }

  TEST_CASE("the spec's example message, exactly") {
    CHECK(error_of({{"CORUN_PROCS", "abc"}}) ==
          "CORUN_PROCS=\"abc\": expected a whole number from 1 to 4096");
  }

  TEST_CASE("every error path names the variable, the value and the accepted form") {
    struct Bad {
      const char* name;
      const char* value;
      const char* fragment;  // a literal piece of the accepted form, besides doc.accepted
    };
    const Bad bads[] = {
        {"CORUN_PROCS", "abc", "from 1 to 4096"},
        {"CORUN_PROCS", "0", "from 1 to 4096"},
        {"CORUN_PROCS", "4097", "from 1 to 4096"},
        {"CORUN_PROCS", "-1", "from 1 to 4096"},
        {"CORUN_PROCS", "+1", "from 1 to 4096"},
        {"CORUN_PROCS", " 1", "from 1 to 4096"},
        {"CORUN_PROCS", "1 ", "from 1 to 4096"},
        {"CORUN_PROCS", "1k", "from 1 to 4096"},
        {"CORUN_PROCS", "0x10", "from 1 to 4096"},
        {"CORUN_PROCS", "1.0", "from 1 to 4096"},
        {"CORUN_PROCS", "18446744073709551615", "from 1 to 4096"},  // 2^64-1: fits, too big
        {"CORUN_PROCS", "18446744073709551616", "from 1 to 4096"},  // 2^64: overflows
        {"CORUN_PROCS", "4294967298", "from 1 to 4096"},            // 2^32+2: no int wrap
        {"CORUN_PIN", "ON", "on or off"},
        {"CORUN_PIN", "yes", "on or off"},
        {"CORUN_PIN", "1", "on or off"},
        {"CORUN_PIN", "on ", "on or off"},
        {"CORUN_NUMA", "on", "auto or off"},
        {"CORUN_NUMA", "Auto", "auto or off"},
        {"CORUN_RUNNEXT_BACKOFF", "spin", "spin:NS"},
        {"CORUN_RUNNEXT_BACKOFF", "spin:", "spin:NS"},
        {"CORUN_RUNNEXT_BACKOFF", "spin:-1", "spin:NS"},
        {"CORUN_RUNNEXT_BACKOFF", "spin:1000001", "from 0 to 1000000"},
        {"CORUN_RUNNEXT_BACKOFF", "spin:3us", "spin:NS"},
        {"CORUN_RUNNEXT_BACKOFF", "usleep", "usleep:US"},
        {"CORUN_RUNNEXT_BACKOFF", "usleep:1000001", "usleep:US"},
        {"CORUN_RUNNEXT_BACKOFF", "yield:1", "or yield"},
        {"CORUN_RUNNEXT_BACKOFF", "sleep:3", "usleep:US"},
        {"CORUN_RUNNEXT_BACKOFF", "SPIN:3", "spin:NS"},
        {"CORUN_RUNNEXT_BACKOFF", "spin:3:4", "spin:NS"},
        {"CORUN_TIMERS", "perp", "per-p or global"},
        {"CORUN_TIMERS", "per_p", "per-p or global"},
        {"CORUN_TIMERS", "local", "per-p or global"},
        {"CORUN_TIMERSLACK_NS", "0", "from 1 to 1000000000"},
        {"CORUN_TIMERSLACK_NS", "1000000001", "from 1 to 1000000000"},
        {"CORUN_TIMERSLACK_NS", "1e3", "from 1 to 1000000000"},
        {"CORUN_TIMER_SPIN", "on", "auto or off"},
        {"CORUN_TIMER_SPIN", "20000", "auto or off"},
        {"CORUN_TIMER_SPIN_NS", "10000001", "from 0 to 10000000"},
        {"CORUN_TIMER_SPIN_NS", "-0", "from 0 to 10000000"},
        {"CORUN_NETPOLL_WAIT", "epoll", "pwait2 or timerfd"},
        {"CORUN_POOL", "shard", "sharded or global"},
        {"CORUN_POOL", "Global", "sharded or global"},
        {"CORUN_POOL_TRIM_MS", "0", "from 1 to 3600000"},
        {"CORUN_POOL_TRIM_MS", "3600001", "from 1 to 3600000"},
        {"CORUN_STACK_KB", "0", "multiple of 4"},
        {"CORUN_STACK_KB", "12", "from 16 to 65536"},
        {"CORUN_STACK_KB", "15", "from 16 to 65536"},
        {"CORUN_STACK_KB", "17", "multiple of 4"},
        {"CORUN_STACK_KB", "65537", "from 16 to 65536"},
        {"CORUN_STACK_KB", "65540", "from 16 to 65536"},
        {"CORUN_STACK_KB", "64k", "multiple of 4"},
        {"CORUN_DEBUG", "schedtrace", "schedtrace=MS"},
        {"CORUN_DEBUG", "=1", "schedtrace=MS"},
        {"CORUN_DEBUG", "foo=1", "known keys: schedtrace, stealorder"},
        {"CORUN_DEBUG", "schedtrace=0", "from 1 to 3600000"},
        {"CORUN_DEBUG", "schedtrace=3600001", "from 1 to 3600000"},
        {"CORUN_DEBUG", "schedtrace=abc", "from 1 to 3600000"},
        {"CORUN_DEBUG", "schedtrace=", "from 1 to 3600000"},
        {"CORUN_DEBUG", "stealorder=2", "0 or 1"},
        {"CORUN_DEBUG", "stealorder=yes", "0 or 1"},
        {"CORUN_DEBUG", "schedtrace=1,", "empty item"},
        {"CORUN_DEBUG", ",", "empty item"},
        {"CORUN_DEBUG", "schedtrace=1,schedtrace=2", "given twice"},
        {"CORUN_DEBUG", "stealorder=1,stealorder=1", "given twice"},
        {"CORUN_DEBUG", "schedtrace=1, stealorder=1", "unknown key \" stealorder\""},
    };
    for (const Bad& b : bads) {
      const std::string msg = error_of({{b.name, b.value}});
      INFO("CORUN var ", b.name, " value [", b.value, "] -> ", msg);
      REQUIRE_FALSE(msg.empty());
      CHECK(msg.rfind(std::string(b.name) + "=\"" + b.value + "\": ", 0) == 0);
      CHECK(contains(msg, b.fragment));
      CHECK_FALSE(contains(msg, "unknown variable"));
      // Plain variables print their documented accepted form verbatim; CORUN_DEBUG's value
      // errors name the key and its accepted values instead (checked by the fragment).
      const std::string name = b.name;
      if (name != "CORUN_DEBUG" || contains(msg, "unknown key") || contains(msg, "empty item") ||
          contains(msg, "not key=value") || contains(msg, "given twice")) {
        CHECK(contains(msg, std::string("expected ") + accepted_of(name)));
      }
    }
  }

  TEST_CASE("CORUN_DEBUG value errors name the key and its accepted values") {
    const std::string m = error_of({{"CORUN_DEBUG", "stealorder=1,schedtrace=x"}});
    CHECK(m ==
          "CORUN_DEBUG=\"stealorder=1,schedtrace=x\": schedtrace=\"x\": expected a whole "
          "number from 1 to 3600000");
    const std::string u = error_of({{"CORUN_DEBUG", "schedtrac=5"}});
    CHECK(contains(u, "unknown key \"schedtrac\""));
    CHECK(contains(u, "schedtrace=MS"));
    CHECK(contains(u, "stealorder=0|1"));
  }

  TEST_CASE("overflow is detected in every numeric variable") {
    const char* big = "99999999999999999999";
    for (const char* name : {"CORUN_PROCS", "CORUN_TIMERSLACK_NS", "CORUN_TIMER_SPIN_NS",
                             "CORUN_POOL_TRIM_MS", "CORUN_STACK_KB"}) {
      const std::string msg = error_of({{name, big}});
      INFO(msg);
      CHECK(contains(msg, std::string(name) + "=\"" + big + "\": expected " + accepted_of(name)));
    }
    CHECK(contains(error_of({{"CORUN_RUNNEXT_BACKOFF", "spin:99999999999999999999"}}), "spin:NS"));
    CHECK(contains(error_of({{"CORUN_DEBUG", "schedtrace=99999999999999999999"}}),
                   "from 1 to 3600000"));
  }

  TEST_CASE("non-printable bytes in a value are escaped in the message") {
    const std::string msg = error_of({{"CORUN_PIN", "o\"n\n\x01\\"}});
    CHECK(msg == "CORUN_PIN=\"o\\\"n\\x0a\\x01\\\\\": expected on or off");
  }

  TEST_CASE("an unknown CORUN_ name is an error listing the known names") {
    const std::string msg = error_of({{"CORUN_PROC", "4"}});
    INFO(msg);
    std::string list;
    for (const auto& n : kExpectedNames) list += (list.empty() ? "" : ", ") + n;
    CHECK(msg.rfind("CORUN_PROC: unknown variable; known: " + list, 0) == 0);
    CHECK(contains(msg, "did you mean CORUN_PROCS?"));

    SUBCASE("even with an empty value (a typo is never silently ignored)") {
      CHECK(contains(error_of({{"CORUN_PROC", ""}}), "CORUN_PROC: unknown variable"));
    }
    SUBCASE("no suggestion when nothing is close") {
      const std::string m = error_of({{"CORUN_ZZZZZZZZZZZZ", "1"}});
      CHECK(contains(m, "CORUN_ZZZZZZZZZZZZ: unknown variable"));
      CHECK_FALSE(contains(m, "did you mean"));
    }
    SUBCASE("names are case-sensitive") {
      CHECK(contains(error_of({{"CORUN_procs", "2"}}), "did you mean CORUN_PROCS?"));
    }
    SUBCASE("the bare prefix") {
      CHECK(contains(error_of({{"CORUN_", "1"}}), "unknown"));
    }
  }

  TEST_CASE("look-alike names in another case are warned about, not errors") {
    using corun::sched::lookalike_warnings;
    const std::string tail = " ignored: names are case-sensitive; did you mean ";
    CHECK(lookalike_warnings({"corun_procs"}) ==
          std::vector<std::string>{"corun: environment variable corun_procs" + tail +
                                   "CORUN_PROCS?"});
    CHECK(lookalike_warnings({"Corun_Timers"}) ==
          std::vector<std::string>{"corun: environment variable Corun_Timers" + tail +
                                   "CORUN_TIMERS?"});
    CHECK(lookalike_warnings({"cORUN_pool_trim_ms"}) ==
          std::vector<std::string>{"corun: environment variable cORUN_pool_trim_ms" + tail +
                                   "CORUN_POOL_TRIM_MS?"});
    // A near miss in another case still gets its suggestion; a far one says what is read.
    CHECK(lookalike_warnings({"corun_proc"})[0] ==
          "corun: environment variable corun_proc" + tail + "CORUN_PROCS?");
    CHECK(lookalike_warnings({"corun_zzzzzzzz"}) ==
          std::vector<std::string>{
              "corun: environment variable corun_zzzzzzzz ignored: names are case-sensitive; "
              "corun reads only upper-case CORUN_* names (see the README's tuning table)"});
    // Not look-alikes: exact CORUN_ names (ours: parsed, or an unknown-name error), other
    // prefixes, the prefix without its underscore.
    for (const char* name : {"CORUN_PROCS", "CORUN_DEBUG", "CORUN_procs", "CORUN_", "corun",
                             "corunprocs", "NOT_CORUN_PROCS", "xcorun_procs", "", "CORUNPROCS"}) {
      INFO(name);
      CHECK(lookalike_warnings({name}).empty());
    }
    // One line per distinct name, in input order; bytes escaped as in error messages.
    CHECK(lookalike_warnings({"corun_pin", "CORUN_PIN", "corun_pin", "Corun_numa"}).size() == 2);
    CHECK(lookalike_warnings({"corun_pin", "Corun_numa"})[1].find("CORUN_NUMA?") !=
          std::string::npos);
    CHECK(lookalike_warnings({"corun_\x01"})[0].find("corun_\\x01 ignored") != std::string::npos);
    // And parse_settings never sees them: the environment scan keeps them out.
    CHECK(error_of({{"CORUN_procs", "2"}}).find("did you mean CORUN_PROCS?") != std::string::npos);
  }

  TEST_CASE("a run with look-alike names starts and warns once per name and process") {
    const auto r = corun::test::child_run(
        "config_lookalikes", {"corun_procs=2", "Corun_Timers=global", "corun_procs_x=1"});
    INFO(r.output);
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == 0);
    CHECK(contains(r.output, "runs: 2\n"));  // the look-alikes did not stop either run
    CHECK(occurrences(
              r.output,
              "corun: environment variable corun_procs ignored: names are case-sensitive; did "
              "you mean CORUN_PROCS?\n") == 1);
    CHECK(occurrences(r.output,
                      "corun: environment variable Corun_Timers ignored: names are case-sensitive; "
                      "did you mean CORUN_TIMERS?\n") == 1);
    CHECK(occurrences(r.output, "environment variable corun_procs_x ignored") == 1);
    CHECK(occurrences(r.output, "corun: environment variable") == 3);
  }

  TEST_CASE("several errors: the first is reported, deterministically") {
    // Known variables in table order, whatever the input order.
    const Vars a = {{"CORUN_PIN", "bad"}, {"CORUN_PROCS", "bad"}};
    const Vars b = {{"CORUN_PROCS", "bad"}, {"CORUN_PIN", "bad"}};
    CHECK(error_of(a).rfind("CORUN_PROCS=", 0) == 0);
    CHECK(error_of(b).rfind("CORUN_PROCS=", 0) == 0);
    CHECK(error_of({{"CORUN_DEBUG", "x"}, {"CORUN_STACK_KB", "1"}}).rfind("CORUN_STACK_KB=", 0) ==
          0);
    // Unknown names come first, alphabetically first among them.
    CHECK(error_of({{"CORUN_PROCS", "bad"}, {"CORUN_ZED", "1"}, {"CORUN_ABC", "1"}})
              .rfind("CORUN_ABC: unknown variable", 0) == 0);
  }

  TEST_CASE("a variable given twice is an error") {
    const std::string msg = error_of({{"CORUN_PROCS", "2"}, {"CORUN_PROCS", "3"}});
    CHECK(msg == "CORUN_PROCS: set more than once (\"2\" and \"3\"); set it once");
  }

  TEST_CASE("known_variables() covers exactly the names parse_settings accepts") {
    const auto& docs = known_variables();
    std::vector<std::string> names;
    for (const auto& d : docs) {
      REQUIRE(d.name != nullptr);
      REQUIRE(d.default_value != nullptr);
      REQUIRE(d.accepted != nullptr);
      REQUIRE(d.meaning != nullptr);
      CHECK(std::string(d.accepted).size() > 0);
      CHECK(std::string(d.meaning).size() > 0);
      CHECK(std::string(d.default_value).size() > 0);
      names.emplace_back(d.name);
      INFO(d.name);
      // Accepted by name: empty = unset parses, garbage gives a value error, not "unknown".
      CHECK_NOTHROW(one(d.name, ""));
      const std::string msg = error_of({{d.name, "\x7f garbage"}});
      CHECK(msg.rfind(std::string(d.name) + "=", 0) == 0);
      CHECK_FALSE(contains(msg, "unknown variable"));
    }
    CHECK(names == kExpectedNames);  // DESIGN.md's table, in its order
    // And the parser knows no other name: the unknown-variable list is exactly the table.
    const std::string msg = error_of({{"CORUN_NOPE", "1"}});
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    CHECK(contains(msg, "known: " + list));
    CHECK(&known_variables() == &docs);  // one static table
  }

  TEST_CASE("format_backoff and describe") {
    CHECK(corun::sched::format_backoff(Backoff{}) == "spin:3000");
    CHECK(corun::sched::format_backoff(Backoff{BackoffKind::usleep, 3}) == "usleep:3");
    CHECK(corun::sched::format_backoff(Backoff{BackoffKind::yield, 0}) == "yield");
    CHECK(corun::sched::describe(Settings{}) ==
          "procs=default pin=on numa=auto runnext_backoff=spin:3000 timers=per-p "
          "timerslack_ns=1000 timer_spin=auto timer_spin_ns=0 netpoll_wait=pwait2 pool=sharded "
          "pool_trim_ms=5000 "
          "stack_kb=default "
          "schedtrace_ms=off stealorder=0");
    // format_backoff's output parses back to the same Backoff.
    for (const Backoff& b : {Backoff{}, Backoff{BackoffKind::spin, 0},
                             Backoff{BackoffKind::usleep, 100}, Backoff{BackoffKind::yield, 0}}) {
      const std::string text = corun::sched::format_backoff(b);
      CHECK(one("CORUN_RUNNEXT_BACKOFF", text.c_str()).runnext_backoff == b);
    }
  }

  TEST_CASE("settings_from_environment reads CORUN_* from environ") {
    EnvGuard guard;  // saves/clears the inherited CORUN_*, restores them at scope exit
    CHECK(corun::sched::settings_from_environment() == Settings{});

    setenv("CORUN_PROCS", "3", 1);
    setenv("CORUN_RUNNEXT_BACKOFF", "usleep:3", 1);
    setenv("CORUN_DEBUG", "stealorder=1", 1);
    setenv("CORUN_STACK_KB", "", 1);      // empty = unset
    setenv("NOT_CORUN_PROCS", "abc", 1);  // other names are not ours
    Settings s = corun::sched::settings_from_environment();
    CHECK(s.procs == 3);
    CHECK(s.runnext_backoff == Backoff{BackoffKind::usleep, 3});
    CHECK(s.debug_stealorder);
    CHECK(s.stack_kb == 0);
    unsetenv("NOT_CORUN_PROCS");

    SUBCASE("a malformed value throws") {
      setenv("CORUN_PIN", "maybe", 1);
      CHECK_THROWS_WITH_AS(corun::sched::settings_from_environment(),
                           "CORUN_PIN=\"maybe\": expected on or off", std::invalid_argument);
    }
    SUBCASE("a typo throws") {
      setenv("CORUN_PROC", "4", 1);
      CHECK_THROWS_AS(corun::sched::settings_from_environment(), std::invalid_argument);
    }
    SUBCASE("a value containing '=' is kept whole") {
      setenv("CORUN_DEBUG", "schedtrace=5,stealorder=0", 1);
      s = corun::sched::settings_from_environment();
      CHECK(s.schedtrace_ms == 5);
      CHECK_FALSE(s.debug_stealorder);
    }
  }
}
