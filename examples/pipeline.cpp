// examples/pipeline.cpp — channels and select: a generator, a pool of workers squaring
// numbers, and a collector that stops early through a quit channel.
//
// Shows: unbuffered and buffered Chan, close() ending a range-style recv loop, select
// with a send case and a recv case (the generator stops as soon as quit is closed),
// move-only values (std::unique_ptr) through a channel, WaitGroup to close the results
// channel once every worker is done.
#include <corun/corun.hpp>

#include <cstdio>
#include <memory>

int main() {
  return corun::run([] {
    corun::Chan<int> numbers;  // unbuffered: the generator waits for a worker
    corun::Chan<std::unique_ptr<long>> results(16);
    corun::Chan<int> quit;  // closed by the collector to stop the generator

    corun::go([=]() mutable {
      for (int i = 1;; i++) {
        bool stop = false;
        corun::select(corun::on_send(numbers, i, [] {}),
                      corun::on_recv(quit, [&](std::optional<int>) { stop = true; }));
        if (stop) break;
      }
      numbers.close();  // workers drain and exit
    });

    auto wg = std::make_shared<corun::WaitGroup>();
    for (int w = 0; w < 4; w++) {
      wg->add(1);
      corun::go([=]() mutable {
        while (auto n = numbers.recv()) results.send(std::make_unique<long>(long{*n} * *n));
        wg->done();
      });
    }
    corun::go([=]() mutable {
      wg->wait();
      results.close();
    });

    long sum = 0;
    int count = 0;
    while (auto r = results.recv()) {
      sum += **r;
      if (++count == 1000) quit.close();  // enough: stop the generator
    }
    std::printf("%d squares (at least 1000), sum %ld, on %d Ps\n", count, sum, corun::procs());
  });
}
