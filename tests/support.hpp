// tests/support.hpp — helpers shared by the runtime test suites.
//
// Every runtime suite (TEST_SUITE("rt.…")) runs at the P count in CORUNTEST_PROCS
// (scripts/run-tests.sh runs them at 1, 2 and 4 Ps; 4 oversubscribes this 2-core machine on
// purpose). A case that needs a P count of its own passes it to run(fn, n) and belongs in a
// unit suite (TEST_SUITE("unit.…"), run once) unless it also uses procs().
// Scale: stress sizes shrink under the sanitizers, which run 5-20x slower.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <corun/corun.hpp>

#include "arch/sanitizer.hpp"
#if CORUN_ASAN
#include <sanitizer/lsan_interface.h>
#endif

namespace corun::test {

inline int procs() {
  const char* s = std::getenv("CORUNTEST_PROCS");
  int n = s ? std::atoi(s) : 2;
  return n > 0 ? n : 2;
}

inline constexpr int kScale = (CORUN_ASAN || CORUN_TSAN) ? 10 : 1;  // divide stress sizes

// ThreadSanitizer counts every live task (a TSan fiber) against its limit of 8128
// threads, and creating one costs milliseconds; tests cap how many tasks are alive at
// once with live_cap() (1000 still overflows a 256-slot ring into the global queue).
inline constexpr int kMaxLive = CORUN_TSAN ? 1000 : (1 << 30);
inline int live_cap(int n) {
  return n < kMaxLive ? n : kMaxLive;
}

// Sets (or, v == nullptr, unsets) an environment variable for one scope and restores it.
struct EnvGuard {
  std::string name, old;
  bool had;
  EnvGuard(const char* n, const char* v) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    if (v)
      setenv(n, v, 1);
    else
      unsetenv(n);
  }
  ~EnvGuard() {
    if (had)
      setenv(name.c_str(), old.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;
};

// Runs fn as the main task of a runtime with procs() Ps (or n if given).
inline void run(std::function<void()> fn, int n = 0) {
  corun::Config cfg;
  cfg.procs = n ? n : procs();
  corun::run(cfg, std::move(fn));
}

// Allocations made while one of these lives are not reported as leaks by LeakSanitizer
// (for a test whose scenario leaks on purpose, e.g. a destructor abandoned mid-way).
// leak_check_off_for_this_thread(): the same for the rest of the calling thread's life
// (for a task that is abandoned and never resumes to turn it back on).
#if CORUN_ASAN
struct LeakCheckOff {
  LeakCheckOff() { __lsan_disable(); }
  ~LeakCheckOff() { __lsan_enable(); }
};
inline void leak_check_off_for_this_thread() {
  __lsan_disable();
}
#else
inline void leak_check_off_for_this_thread() {}
struct LeakCheckOff {
  LeakCheckOff() {}  // user-provided: a scoped object is not an "unused variable"
};
#endif

// Aborts the process, naming the test, if it is destroyed later than `limit` after birth:
// a lost wake-up becomes a named failure instead of a CI timeout. A thread, not a task,
// so it fires even when every P is stuck.
class Watchdog {
 public:
  Watchdog(std::string what, std::chrono::seconds limit)
      : what_(std::move(what)), th_([this, limit] {
          std::unique_lock<std::mutex> lk(mu_);
          if (!cv_.wait_for(lk, limit, [this] { return done_; })) {
            std::fprintf(stderr, "corun-tests: \"%s\" still running after %lld s: hung\n",
                         what_.c_str(), static_cast<long long>(limit.count()));
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_one();
    th_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  std::thread th_;     // last: starts after the members above exist
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- emulation ----------------------------------------------------------------------
// Under a user-mode emulator (make test ARCH=aarch64 on an x86-64 host runs this binary as
// `qemu-aarch64-static build/aarch64/corun-tests`), scripts/run-tests.sh sets
// CORUNTEST_EMULATOR to that command prefix (RUNNER). The emulator's name, or null when the
// binary runs natively. Rejected: guessing from inside (qemu-user passes the host's
// /proc/cpuinfo through, but newer qemus fake it): the runner knows, so the runner says.
inline const char* emulator() {
  const char* s = std::getenv("CORUNTEST_EMULATOR");
  return s && *s ? s : nullptr;
}

// A test that cannot work under emulation ends here, printing why, when emulated; natively
// it runs. Use at the top of a TEST_CASE (it returns from the enclosing function).
#define CORUN_TEST_SKIP_IF_EMULATED(reason)                                         \
  do {                                                                              \
    if (const char* emu_ = ::corun::test::emulator()) {                             \
      MESSAGE("skipped under emulation (" << std::string(emu_) << "): " << reason); \
      return;                                                                       \
    }                                                                               \
  } while (0)

// s without the lines the emulator itself writes to stderr when the guest dies of a signal
// ("qemu: uncaught target signal 6 (Aborted) - core dumped"); a native run prints none, so
// tests that compare a child's exact output compare what the program wrote.
inline std::string without_emulator_lines(const std::string& s) {
  if (!emulator()) return s;
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t e = s.find('\n', i);
    e = e == std::string::npos ? s.size() : e + 1;
    if (s.compare(i, 6, "qemu: ") != 0) out.append(s, i, e - i);
    i = e;
  }
  return out;
}

}  // namespace corun::test

// ---- death tests --------------------------------------------------------------------
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>

namespace corun::test {

inline std::map<std::string, int (*)()>& child_scenarios() {
  static std::map<std::string, int (*)()> m;
  return m;
}

struct ChildRegistrar {
  ChildRegistrar(const char* name, int (*fn)()) { child_scenarios()[name] = fn; }
};

inline int run_child_scenario(const std::string& name) {
  auto it = child_scenarios().find(name);
  if (it == child_scenarios().end()) return 99;
  return it->second();
}

struct ChildResult {
  int status = 0;      // waitpid status
  std::string output;  // stderr + stdout
  bool signaled(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
};

// Re-runs this binary as `--corun-child=name` with extra environment entries. Under an
// emulator the child runs under it too: the host kernel cannot exec a foreign binary (no
// binfmt_misc handler is assumed), so the emulator's command (CORUNTEST_EMULATOR, split at
// spaces, found in PATH) is spawned with this binary's path (/proc/self/exe, which
// qemu-user resolves to the guest binary) as its first argument.
inline ChildResult child_run(const std::string& name, std::vector<std::string> env = {}) {
  ChildResult r;
  char path[] = "/tmp/corun-child-XXXXXX";
  int fd = mkstemp(path);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  std::string arg = "--corun-child=" + name;
  std::vector<std::string> words;
  if (const char* emu = emulator()) {
    std::string all = emu;
    for (std::size_t i = 0; i < all.size();) {
      std::size_t e = all.find(' ', i);
      if (e == std::string::npos) e = all.size();
      if (e > i) words.push_back(all.substr(i, e - i));
      i = e + 1;
    }
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    words.emplace_back(len > 0 ? std::string(self, static_cast<std::size_t>(len)) : "");
  } else {
    words.emplace_back("corun-tests");
  }
  words.push_back(arg);
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** e = environ; *e; e++) envs.emplace_back(*e);
  for (auto& e : env) envs.push_back(e);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid;
  const int spawned =
      emulator() ? posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), envp.data())
                 : posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), envp.data());
  if (spawned == 0) waitpid(pid, &r.status, 0);
  posix_spawn_file_actions_destroy(&fa);
  lseek(fd, 0, SEEK_SET);
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) r.output.append(buf, static_cast<std::size_t>(n));
  close(fd);
  unlink(path);
  r.output = without_emulator_lines(r.output);
  return r;
}

}  // namespace corun::test

#define CORUN_TEST_CHILD_CAT2(a, b) a##b
#define CORUN_TEST_CHILD_CAT(a, b) CORUN_TEST_CHILD_CAT2(a, b)
#define CORUN_TEST_CHILD(NAME)                                                 \
  static int CORUN_TEST_CHILD_CAT(child_, NAME)();                             \
  static ::corun::test::ChildRegistrar CORUN_TEST_CHILD_CAT(child_reg_, NAME)( \
      #NAME, &CORUN_TEST_CHILD_CAT(child_, NAME));                             \
  static int CORUN_TEST_CHILD_CAT(child_, NAME)()
