// os/futex.cpp — the futex(2) calls behind os/futex.hpp: private waits and wakes through
// syscall(SYS_futex), which glibc does not wrap. Results come back as errno values and
// nothing here retries: every caller re-checks its own condition in a loop, which covers
// EINTR and spurious wake-ups alike.
#include "os/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace corun::os {
namespace {
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
              "futex words must be plain 32-bit integers");

long sys_futex(void* addr, int op, std::uint32_t val, const timespec* ts,
               std::uint32_t val3) noexcept {
  return syscall(SYS_futex, addr, op, val, ts, nullptr, val3);
}
}  // namespace

int futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected) noexcept {
  long r = sys_futex(word, FUTEX_WAIT_PRIVATE, expected, nullptr, 0);
  return r == 0 ? 0 : errno;
}

int futex_wait_until(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                     const timespec& deadline) noexcept {
  // FUTEX_WAIT_BITSET takes an absolute timeout on CLOCK_MONOTONIC (no FUTEX_CLOCK_REALTIME).
  long r = sys_futex(word, FUTEX_WAIT_BITSET_PRIVATE, expected, &deadline, FUTEX_BITSET_MATCH_ANY);
  return r == 0 ? 0 : errno;
}

int futex_wake(std::atomic<std::uint32_t>* word, int n) noexcept {
  long r = sys_futex(word, FUTEX_WAKE_PRIVATE, static_cast<std::uint32_t>(n), nullptr, 0);
  return r < 0 ? 0 : static_cast<int>(r);
}

}  // namespace corun::os
