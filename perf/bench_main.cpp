// perf/bench_main.cpp — main() of build/corun-bench. The benchmarks register themselves
// (CORUN_BENCHMARK in perf/bench_*.cpp); the driver is corun::bench::main (bench.cpp).
// Kept apart so that a test or another binary can link the harness without this main.
#include "bench.hpp"

int main(int argc, char** argv) {
  return corun::bench::main(argc, argv);
}
