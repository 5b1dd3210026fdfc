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

// Re-runs this binary as `--corun-child=name` with extra environment entries.
inline ChildResult child_run(const std::string& name, std::vector<std::string> env = {}) {
  ChildResult r;
  char path[] = "/tmp/corun-child-XXXXXX";
  int fd = mkstemp(path);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  std::string arg = "--corun-child=" + name;
  char* argv[] = {const_cast<char*>("corun-tests"), arg.data(), nullptr};
  std::vector<std::string> envs;
  for (char** e = environ; *e; e++) envs.emplace_back(*e);
  for (auto& e : env) envs.push_back(e);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, envp.data()) == 0)
    waitpid(pid, &r.status, 0);
  posix_spawn_file_actions_destroy(&fa);
  lseek(fd, 0, SEEK_SET);
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) r.output.append(buf, static_cast<std::size_t>(n));
  close(fd);
  unlink(path);
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
