// examples/fanout.cpp — a small real program: fan work out to tasks, gather with a
// WaitGroup, guard shared state with a Mutex, and run a blocking call off the P.
//
//   make && build/examples/fanout            (CORUN_PROCS=4 build/examples/fanout)
#include <corun/corun.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

int main() {
  return corun::run([] {
    std::map<int, int> histogram;  // remainder -> count, guarded by mu
    corun::Mutex mu;
    corun::WaitGroup wg;
    for (int i = 0; i < 10000; i++) {
      wg.add(1);
      corun::go([&, i] {
        int r = (i * 2654435761u) % 7;
        std::lock_guard<corun::Mutex> g(mu);
        histogram[r]++;
        wg.done();
      });
    }
    // A blocking read runs without holding the P: other tasks keep running meanwhile.
    std::string first_line = corun::blocking([] {
      std::ifstream f("/proc/self/status");
      std::string line;
      std::getline(f, line);
      return line;
    });
    wg.wait();
    std::printf("%d Ps; %s\n", corun::procs(), first_line.c_str());
    for (auto [r, n] : histogram) std::printf("remainder %d: %d\n", r, n);
  });
}
