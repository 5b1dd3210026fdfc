// examples/deadline.cpp — requests with deadlines: each request gets a context with a
// timeout; a worker that is too slow is abandoned when the context's done() closes, and a
// ticker reports progress meanwhile. Build: make (build/examples/deadline).
#include <corun/corun.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <variant>

using namespace std::chrono_literals;

// A "backend" that takes `cost` to answer (a sleep standing in for I/O).
corun::Chan<int> backend(int request, corun::Duration cost) {
  corun::Chan<int> reply(1);  // buffered: the worker never blocks if nobody waits any more
  corun::go([=]() mutable {
    corun::sleep(cost);
    reply.send(request * 10);
  });
  return reply;
}

// Waits for the backend's answer or the context's deadline, whichever comes first.
std::optional<int> handle(const corun::Context& parent, int request, corun::Duration cost) {
  auto [ctx, cancel] = corun::with_timeout(parent, 20ms);
  std::optional<int> answer;
  corun::select(corun::on_recv(backend(request, cost), [&](std::optional<int> v) { answer = v; }),
                corun::on_recv(ctx.done(), [](std::optional<std::monostate>) {}));
  cancel();  // always: stops the context's timer
  return answer;
}

int main() {
  return corun::run([] {
    corun::Ticker progress(10ms);
    corun::WaitGroup wg;
    int ok = 0, timed_out = 0;
    corun::Mutex mu;
    for (int i = 0; i < 8; i++) {
      wg.add(1);
      corun::go([&, i] {
        auto cost = i % 3 == 0 ? 50ms : 5ms;  // every third request is too slow
        auto r = handle(corun::Context::background(), i, cost);
        std::lock_guard<corun::Mutex> g(mu);
        if (r)
          ok++;
        else
          timed_out++;
        std::printf("request %d: %s\n", i, r ? std::to_string(*r).c_str() : "deadline exceeded");
        wg.done();
      });
    }
    corun::Chan<bool> all_done(1);
    corun::go([&] {
      wg.wait();
      all_done.send(true);
    });
    for (bool done = false; !done;)
      corun::select(
          corun::on_recv(progress.channel(),
                         [](std::optional<corun::Clock::time_point>) { std::puts("tick"); }),
          corun::on_recv(all_done, [&](std::optional<bool>) { done = true; }));
    std::printf("%d answered, %d timed out\n", ok, timed_out);
  });
}
