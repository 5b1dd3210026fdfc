// os/futex.hpp — the Linux futex contract corun parks threads with.
//
// Private futexes only (the words never cross processes). Timed waits take an absolute
// CLOCK_MONOTONIC deadline (FUTEX_WAIT_BITSET|FUTEX_CLOCK_... is not needed: BITSET waits
// are measured on CLOCK_MONOTONIC by default), so a wait interrupted by a signal and
// retried never stretches the deadline, unlike relative FUTEX_WAIT timeouts.
// Rejected: pthread condition variables — they add a mutex round trip per wake, and
// their timed wait converts to relative time internally on older glibc.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>

namespace corun::os {

// Sleeps while *word == expected. Returns 0 when woken (or spuriously), EAGAIN when the
// value already differed, EINTR on a signal. Callers re-check their condition in a loop.
int futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected) noexcept;

// As futex_wait, until the absolute CLOCK_MONOTONIC time `deadline`; ETIMEDOUT after it.
int futex_wait_until(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                     const timespec& deadline) noexcept;

// Wakes up to n waiters of *word; returns how many were woken.
int futex_wake(std::atomic<std::uint32_t>* word, int n) noexcept;

}  // namespace corun::os
