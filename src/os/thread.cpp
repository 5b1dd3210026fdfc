// os/thread.cpp — per-thread OS settings (contract: thread.hpp): timer slack through
// prctl(PR_SET_TIMERSLACK), the thread's name through pthread_setname_np. Each acts on the
// calling thread only. A name is a debugging aid, so a failure to set it is ignored; a
// refused slack is reported to the caller as an errno value.
#include "os/thread.hpp"

#include <pthread.h>
#include <sys/prctl.h>

#include <cerrno>
#include <cstring>

namespace corun::os {

int set_timer_slack_ns(std::uint64_t ns) noexcept {
  // prctl(PR_SET_TIMERSLACK, 0) would mean "back to the default", never what we ask.
  if (ns == 0) ns = 1;
  return prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(ns), 0, 0, 0) == 0 ? 0 : errno;
}

std::uint64_t timer_slack_ns() noexcept {
  int r = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  return r < 0 ? 0 : static_cast<std::uint64_t>(r);
}

void set_thread_name(const char* name) noexcept {
  char buf[16];
  std::strncpy(buf, name, sizeof buf - 1);
  buf[sizeof buf - 1] = '\0';
  pthread_setname_np(pthread_self(), buf);
}

}  // namespace corun::os
