// examples/bufpool.cpp — reusing buffers through a Pool: many tasks render records into
// pooled std::string buffers and hand them to one writer task over a channel, which
// gives each buffer back once written. After warm-up no render allocates: the buffers
// (and their capacity) circulate between the Ps' caches and the pool's depot.
// Build: make (build/examples/bufpool).
#include <corun/corun.hpp>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>

int main() {
  std::atomic<int> made{0};
  corun::Pool<std::string> buffers([&] {
    made.fetch_add(1, std::memory_order_relaxed);
    auto s = std::make_unique<std::string>();
    s->reserve(256);
    return s;
  });
  constexpr int kTasks = 64, kRecords = 2000;
  corun::run([&] {
    corun::Chan<std::unique_ptr<std::string>> out(128);
    corun::WaitGroup wg;
    wg.add(kTasks);
    for (int t = 0; t < kTasks; t++)
      corun::go([&, t] {
        for (int i = 0; i < kRecords; i++) {
          std::unique_ptr<std::string> b = buffers.get();  // cached, or made
          b->clear();                                      // keeps its capacity
          *b += "task ";
          *b += std::to_string(t);
          *b += " record ";
          *b += std::to_string(i);
          out.send(std::move(b));
        }
        wg.done();
      });
    corun::go([&] {
      wg.wait();
      out.close();
    });
    std::size_t bytes = 0, n = 0;
    while (auto b = out.recv()) {
      bytes += (*b)->size();  // "write" it
      n++;
      buffers.put(std::move(*b));  // back for the next render
    }
    std::printf("%zu records, %zu bytes, %d buffers made for them\n", n, bytes, made.load());
  });
}
