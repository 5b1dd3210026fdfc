// perf/bench.cpp — the driver of build/corun-bench: flags, registry, Go's N ramp, Go's
// output format. The interface and how to write a benchmark are in bench.hpp.
//
// Flags (go test's, with or without the "test." prefix, one or two dashes, "-f v" or
// "-f=v"): -bench REGEX, -cpu 1,2,4, -count N, -benchtime 1s|500ms|Nx, -list REGEX, -h.
// REGEX is an ECMAScript std::regex searched (unanchored) in the name without the
// "Benchmark" prefix: "-bench ^Create" selects CreateTasks and CreateTasksParallel, "."
// everything. (Go matches per '/'-level against "BenchmarkName"; patterns written for
// that with a "Benchmark" prefix do not apply here.)
//
// One result = one (benchmark, P, repetition): a fresh corun::run(Config{.procs = P})
// whose main task runs the ramp. Ramp (Go's launch): run b.n = 1; while the last run took
// less than -benchtime and n < 1e9, predict n = benchtime / (last ns/op), +20%, at most
// 100x and at least +1 over the last n, rounded up to 1,2,3,5 x 10^k (the rounding of Go
// <= 1.12: readable N, runs comparable across settings), capped at 1e9. The last run is
// printed. -benchtime Nx runs exactly N once (Go runs N = 1 first, then N; we skip that
// probe). A benchmark with Options::max_n runs once with that n.
//
// Output (Go 1.19 testing's format, byte for byte where it matters to parsers):
//   goos: linux / goarch: amd64 / pkg: corun / cpu: <model name>   (once, before results)
//   "%-*s\t" name (Benchmark<name>, "-P" suffix unless P == 1, padded as Go pads)
//   "%8d" N, then "\t" + value + " " + unit for ns/op and each metric (sorted by unit),
//   numbers in Go's prettyPrint widths; finally PASS (exit 0) or FAIL (exit 1).
// A benchmark that throws prints "--- FAIL: Benchmark<name>" and its message.
//
// Rejected: printing every run of the ramp (Go prints only the last); sorting benchmarks
// by name (registration order keeps a suite's sub-benchmarks in their natural order).
#include "bench.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
// g++ 12 with -fsanitize=address -O2 warns maybe-uninitialized inside libstdc++'s regex
// compiler (a false positive in std::function moves); -Werror would fail SAN=address.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#else
#include <regex>
#endif
#include <set>
#include <string_view>
#include <vector>

namespace corun::bench {

namespace {

struct Entry {
  std::string name;  // without the "Benchmark" prefix
  std::function<void(B&)> fn;
  Options opts;
};

// Filled during static initialisation (single-threaded), read by main(); never touched by
// two threads at once.
std::vector<Entry>& registry() {
  static std::vector<Entry> r;
  return r;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// user + system CPU time of the whole process (all threads: every M of the runtime).
std::int64_t process_cpu_ns() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) {
    return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 +
           static_cast<std::int64_t>(t.tv_usec) * 1'000;
  };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

constexpr std::int64_t kMaxN = 1'000'000'000;  // Go's cap on b.N

}  // namespace

// ---- B --------------------------------------------------------------------------------

void B::reset_timer() {
  if (timer_on_) {
    start_ns_ = now_ns();
    start_cpu_ns_ = process_cpu_ns();
  }
  duration_ns_ = 0;
  cpu_ns_ = 0;
  extra_.clear();
}

void B::start_timer() {
  if (timer_on_) return;
  start_cpu_ns_ = process_cpu_ns();
  start_ns_ = now_ns();
  timer_on_ = true;
}

void B::stop_timer() {
  if (!timer_on_) return;
  duration_ns_ += now_ns() - start_ns_;
  cpu_ns_ += process_cpu_ns() - start_cpu_ns_;
  timer_on_ = false;
}

void B::report_metric(double value, std::string unit) {
  if (unit.empty()) throw std::invalid_argument("report_metric: the unit must not be empty");
  for (unsigned char c : unit)
    if (std::isspace(c) || std::iscntrl(c))
      throw std::invalid_argument("report_metric: unit \"" + unit +
                                  "\" contains whitespace; accepted: e.g. \"B/task\"");
  extra_[std::move(unit)] = value;
}

void B::begin_run(std::int64_t iterations) {
  n = iterations;
  timer_on_ = false;
  want_cpu_ = false;
  reset_timer();
  start_timer();
}

void B::end_run() {
  stop_timer();
  if (want_cpu_ && duration_ns_ > 0) {
    extra_["cpu%"] = static_cast<double>(cpu_ns_) / static_cast<double>(duration_ns_) * 100.0;
    if (n > 0) extra_["cpu-ns/op"] = static_cast<double>(cpu_ns_) / static_cast<double>(n);
  }
  previous_n_ = n;
  previous_ns_ = duration_ns_;
}

void register_benchmark(std::string name, std::function<void(B&)> fn, Options opts) {
  registry().push_back(Entry{std::move(name), std::move(fn), opts});
}

// ---- flags ----------------------------------------------------------------------------

namespace {

struct BenchTime {
  std::int64_t d_ns = 1'000'000'000;  // duration goal, when count == 0
  std::int64_t count = 0;             // > 0: exactly this many iterations
};

struct Flags {
  bool help = false;
  bool have_bench = false;
  std::string bench;
  bool have_list = false;
  std::string list;
  std::vector<int> cpus;  // empty: the default procs
  std::int64_t count = 1;
  BenchTime benchtime;
};

const char kUsage[] =
    "usage: corun-bench [-bench REGEX] [-cpu 1,2,4] [-count N] [-benchtime 1s|500ms|Nx]\n"
    "                   [-list REGEX] [-h]\n"
    "  -bench REGEX     run the benchmarks whose name (without \"Benchmark\") matches the\n"
    "                   ECMAScript regex (unanchored search); \".\" runs all\n"
    "  -cpu LIST        comma list of P counts, one corun::run per count\n"
    "                   (default: the runtime's default procs, see CORUN_PROCS)\n"
    "  -count N         run each benchmark N times per P count (default 1)\n"
    "  -benchtime T     target time per result, Go duration (1s, 500ms, 1m30s) or Nx for\n"
    "                   exactly N iterations (default 1s)\n"
    "  -list REGEX      print the matching benchmark names and exit\n"
    "  -h               this help\n"
    "Output is Go's benchmark format: compare runs with scripts/benchcmp OLD NEW.\n";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "corun-bench: %s\n(corun-bench -h shows the flags)\n", msg.c_str());
  std::exit(2);
}

[[noreturn]] void bad_value(std::string_view flag, std::string_view value,
                            std::string_view accepted) {
  usage_error("invalid value \"" + std::string(value) + "\" for -" + std::string(flag) +
              ": accepted: " + std::string(accepted));
}

// Strict decimal integer in [lo, hi].
bool parse_int(std::string_view s, std::int64_t lo, std::int64_t hi, std::int64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  std::int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

// Go's time.ParseDuration subset without sign: ("12" | "1.5") unit, repeated; units ns,
// us, µs, μs, ms, s, m, h. Returns nanoseconds, or -1 if malformed or >= ~292 years.
std::int64_t parse_duration(std::string_view s) {
  static const std::pair<std::string_view, long double> kUnits[] = {
      {"ns", 1.0L}, {"us", 1e3L}, {"\xC2\xB5s", 1e3L}, {"\xCE\xBCs", 1e3L},
      {"ms", 1e6L}, {"s", 1e9L},  {"m", 60e9L},        {"h", 3600e9L}};
  if (s.empty()) return -1;
  long double total = 0;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t num_start = i;
    long double v = 0;
    bool digits = false;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') v = v * 10 + (s[i++] - '0'), digits = true;
    if (i < s.size() && s[i] == '.') {
      ++i;
      long double scale = 0.1L;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        v += (s[i++] - '0') * scale;
        scale /= 10;
        digits = true;
      }
    }
    if (!digits || i == num_start) return -1;
    std::size_t unit_end = i;
    while (unit_end < s.size() && !(s[unit_end] >= '0' && s[unit_end] <= '9') && s[unit_end] != '.')
      ++unit_end;
    const std::string_view unit = s.substr(i, unit_end - i);
    bool found = false;
    for (const auto& [name, mult] : kUnits)
      if (unit == name) {
        total += v * mult;
        found = true;
      }
    if (!found) return -1;
    i = unit_end;
  }
  if (total >= 9.2e18L) return -1;
  return static_cast<std::int64_t>(total);
}

std::regex compile_regex(std::string_view flag, const std::string& pattern) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    bad_value(flag, pattern, std::string("an ECMAScript regex (") + e.what() + ")");
  }
}

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-')
      usage_error("unexpected argument \"" + std::string(arg) +
                  "\": accepted: flags only, e.g. -bench . -cpu 1,2");
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    if (arg.substr(0, 5) == "test.") arg.remove_prefix(5);
    std::string_view name = arg;
    std::string value;
    bool have_value = false;
    if (const auto eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = std::string(arg.substr(eq + 1));
      have_value = true;
    }
    if (name == "h" || name == "help") {
      f.help = true;
      continue;
    }
    static const std::set<std::string_view> kValued = {"bench", "cpu", "count", "benchtime",
                                                       "list"};
    if (!kValued.count(name))
      usage_error("unknown flag -" + std::string(name) +
                  ": accepted: -bench, -cpu, -count, -benchtime, -list, -h");
    if (!have_value) {
      if (i + 1 >= argc) usage_error("flag -" + std::string(name) + " needs a value");
      value = argv[++i];
    }
    if (name == "bench") {
      f.have_bench = true;
      f.bench = value;
    } else if (name == "list") {
      f.have_list = true;
      f.list = value;
    } else if (name == "count") {
      if (!parse_int(value, 1, 1'000'000, &f.count))
        bad_value(name, value, "a positive integer, e.g. -count 10");
    } else if (name == "cpu") {
      f.cpus.clear();
      std::size_t pos = 0;
      while (pos <= value.size()) {
        std::size_t comma = value.find(',', pos);
        if (comma == std::string::npos) comma = value.size();
        std::string item = value.substr(pos, comma - pos);
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        if (!item.empty()) {
          std::int64_t p = 0;
          if (!parse_int(item, 1, 1 << 16, &p))
            bad_value(name, value, "a comma list of positive P counts, e.g. -cpu 1,2,4");
          f.cpus.push_back(static_cast<int>(p));
        }
        pos = comma + 1;
      }
      if (f.cpus.empty())
        bad_value(name, value, "a comma list of positive P counts, e.g. -cpu 1,2,4");
    } else if (name == "benchtime") {
      if (!value.empty() && value.back() == 'x') {
        std::int64_t n = 0;
        if (!parse_int(std::string_view(value).substr(0, value.size() - 1), 1, kMaxN, &n))
          bad_value(name, value, "a Go duration (1s, 500ms, 1m30s) or Nx with 1 <= N <= 1e9");
        f.benchtime = BenchTime{0, n};
      } else {
        const std::int64_t d = parse_duration(value);
        if (d <= 0)
          bad_value(name, value, "a Go duration (1s, 500ms, 1m30s) or Nx with 1 <= N <= 1e9");
        f.benchtime = BenchTime{d, 0};
      }
    }
  }
  return f;
}

// ---- output ---------------------------------------------------------------------------

// Go's testing.prettyPrint: 10 places before the point, 4 significant figures for small.
std::string pretty(double x, const std::string& unit) {
  const double y = std::fabs(x);
  const char* format;
  if (y == 0 || y >= 999.95) {
    format = "%10.0f %s";
  } else if (y >= 99.995) {
    format = "%12.1f %s";
  } else if (y >= 9.9995) {
    format = "%13.2f %s";
  } else if (y >= 0.99995) {
    format = "%14.3f %s";
  } else if (y >= 0.099995) {
    format = "%15.4f %s";
  } else if (y >= 0.0099995) {
    format = "%16.5f %s";
  } else if (y >= 0.00099995) {
    format = "%17.6f %s";
  } else {
    format = "%18.7f %s";
  }
  char buf[128];
  std::snprintf(buf, sizeof buf, format, x, unit.c_str());
  return buf;
}

std::string bench_name(const std::string& name, int procs) {
  std::string s = "Benchmark" + name;
  if (procs != 1) s += "-" + std::to_string(procs);
  return s;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    v.erase(v.find_last_not_of(" \t\r") + 1);
    return v;
  }
  return "";  // (arm64 kernels often have no model name: Go then prints no cpu line)
}

const char* goarch() {
#if defined(__x86_64__)
  return "amd64";
#elif defined(__aarch64__)
  return "arm64";
#elif defined(__i386__)
  return "386";
#else
  return "unknown";
#endif
}

}  // namespace

// ---- running --------------------------------------------------------------------------

struct Runner {
  struct Outcome {
    std::string error;  // non-empty: the benchmark failed
    int procs = 0;      // corun::procs() seen inside the run
    std::int64_t n = 0;
    std::int64_t ns = 0;
    std::map<std::string, double> extra;
  };

  static std::int64_t round_up(std::int64_t n) {  // to 1, 2, 3, 5 x 10^k (Go <= 1.12)
    std::int64_t base = 1;
    for (std::int64_t m = n; m >= 10; m /= 10) base *= 10;
    if (n <= base) return base;
    if (n <= 2 * base) return 2 * base;
    if (n <= 3 * base) return 3 * base;
    if (n <= 5 * base) return 5 * base;
    return 10 * base;
  }

  static void launch(B& b, const Entry& e, const BenchTime& bt) {
    auto run_n = [&](std::int64_t k) {
      b.begin_run(k);
      e.fn(b);
      b.end_run();
    };
    if (e.opts.max_n > 0) {
      run_n(bt.count > 0 ? std::min(bt.count, e.opts.max_n) : e.opts.max_n);
      return;
    }
    if (bt.count > 0) {
      run_n(bt.count);
      return;
    }
    run_n(1);
    for (std::int64_t k = 1; b.duration_ns_ < bt.d_ns && k < kMaxN;) {
      const std::int64_t last = k;
      const std::int64_t prev_ns = std::max<std::int64_t>(b.duration_ns_, 1);
      // Multiply first, then divide (Go: for fast ops prev_iters ~ prev_ns); long double
      // so that long benchtimes cannot overflow.
      long double pred = static_cast<long double>(bt.d_ns) * static_cast<long double>(b.n) /
                         static_cast<long double>(prev_ns);
      pred = std::min(pred, 1e15L);
      k = static_cast<std::int64_t>(pred);
      k += k / 5;                   // run 20% more than predicted
      k = std::min(k, 100 * last);  // do not grow too fast after a timing error
      k = std::max(k, last + 1);    // always progress
      k = std::min(round_up(k), kMaxN);
      run_n(k);
    }
  }

  // One result: boots a runtime with `procs` Ps and runs the ramp in its main task.
  // Throws what corun::run throws (bad CORUN_* variable, runtime already running).
  static Outcome run_one(const Entry& e, int procs, const BenchTime& bt) {
    Outcome out;
    corun::run(corun::Config{.procs = procs}, [&] {
      out.procs = corun::procs();
      B b;
      b.procs_ = out.procs;
      try {
        launch(b, e, bt);
        out.n = b.n;
        out.ns = b.duration_ns_;
        out.extra = b.extra_;
      } catch (const std::exception& ex) {
        out.error = ex.what();
        if (out.error.empty()) out.error = "exception with an empty message";
      } catch (...) {
        out.error = "unknown exception";
      }
    });
    return out;
  }
};

namespace {

bool valid_name(const std::string& name) {
  if (name.empty()) return false;
  for (unsigned char c : name)
    if (std::isspace(c) || std::iscntrl(c)) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse_flags(argc, argv);
  if (flags.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }

  std::set<std::string> seen;
  for (const Entry& e : registry()) {
    if (!valid_name(e.name)) {
      std::fprintf(stderr,
                   "corun-bench: benchmark name \"%s\" is not accepted: it must be non-empty "
                   "without whitespace\n",
                   e.name.c_str());
      return 2;
    }
    if (!seen.insert(e.name).second) {
      std::fprintf(stderr, "corun-bench: benchmark \"%s\" is registered twice\n", e.name.c_str());
      return 2;
    }
  }

  if (flags.have_list) {
    const std::regex re = compile_regex("list", flags.list);
    for (const Entry& e : registry())
      if (std::regex_search(e.name, re)) std::printf("Benchmark%s\n", e.name.c_str());
    return 0;
  }
  if (!flags.have_bench) {
    std::fputs(
        "corun-bench: no -bench given, nothing run; try -bench . (all), -list . (names), "
        "-h\n",
        stderr);
    return 0;
  }

  const std::regex re = compile_regex("bench", flags.bench);
  std::vector<const Entry*> selected;
  for (const Entry& e : registry())
    if (std::regex_search(e.name, re)) selected.push_back(&e);
  if (selected.empty()) {
    std::fprintf(stderr, "corun-bench: no benchmark matches -bench %s (-list . shows them)\n",
                 flags.bench.c_str());
    std::puts("PASS");
    return 0;
  }

  std::vector<int> cpus = flags.cpus;
  if (cpus.empty()) {  // Go: -cpu defaults to GOMAXPROCS; ours: ask a runtime
    int p = 0;
    try {
      corun::run(corun::Config{}, [&] { p = corun::procs(); });
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "corun-bench: corun::run failed: %s\n", ex.what());
      return 2;
    }
    cpus.push_back(p);
  }

  // Go's padding: len(name with the biggest -P) + len("-P") + 1.
  const int max_procs = std::max(1, *std::max_element(cpus.begin(), cpus.end()));
  const std::size_t ext_len = max_procs == 1 ? 0 : 1 + std::to_string(max_procs).size();
  std::size_t max_len = 0;
  for (const Entry* e : selected)
    max_len = std::max(max_len, bench_name(e->name, max_procs).size() + ext_len + 1);

  std::printf("goos: linux\ngoarch: %s\npkg: corun\n", goarch());
  if (const std::string cpu = cpu_model(); !cpu.empty()) std::printf("cpu: %s\n", cpu.c_str());
  std::fflush(stdout);

  bool failed = false;
  for (const Entry* e : selected) {
    for (int procs : cpus) {
      for (std::int64_t rep = 0; rep < flags.count; ++rep) {
        const std::string name = bench_name(e->name, procs);
        std::printf("%-*s\t", static_cast<int>(max_len), name.c_str());
        std::fflush(stdout);
        Runner::Outcome out;
        try {
          out = Runner::run_one(*e, procs, flags.benchtime);
        } catch (const std::exception& ex) {
          std::printf("\n");
          std::fprintf(stderr, "corun-bench: corun::run failed: %s\n", ex.what());
          return 2;
        }
        if (!out.error.empty()) {
          std::printf("--- FAIL: %s\n    %s\n", name.c_str(), out.error.c_str());
          std::fflush(stdout);
          failed = true;
          continue;
        }
        std::string line;
        char buf[32];
        std::snprintf(buf, sizeof buf, "%8lld", static_cast<long long>(out.n));
        line += buf;
        const double ns_op = static_cast<double>(out.ns) / static_cast<double>(out.n);
        if (ns_op != 0) line += "\t" + pretty(ns_op, "ns/op");
        for (const auto& [unit, value] : out.extra) {
          if (unit == "ns/op") continue;
          line += "\t" + pretty(value, unit);
        }
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
        if (out.procs != procs)
          std::fprintf(stderr, "corun-bench: %s ran with %d Ps, not %d\n", name.c_str(), out.procs,
                       procs);
      }
    }
  }
  std::puts(failed ? "FAIL" : "PASS");
  return failed ? 1 : 0;
}

}  // namespace corun::bench
