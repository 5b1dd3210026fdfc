// tests/main.cpp — doctest's main for build/corun-tests. Every test case is in a suite
// named "unit.…" (no runtime, or one that boots its own P counts) or "rt.…" (boots with
// CORUNTEST_PROCS Ps, read by tests/support.hpp); scripts/run-tests.sh runs the unit
// suites once and the runtime suites at several P counts, and fails on any other name.
//
// Death tests (a task overflowing its stack, an exception escaping a task) re-execute
// this binary with `--corun-child=NAME` (tests/support.hpp child_run) so the parent's
// threads and sanitizer state stay out of the child. Scenarios register with
// CORUN_TEST_CHILD(NAME).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "support.hpp"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    if (std::strncmp(argv[i], "--corun-child=", 14) == 0)
      return corun::test::run_child_scenario(argv[i] + 14);
  }
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
