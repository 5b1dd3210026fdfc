// corun/chan.hpp — channels and select (API.md "Channels and select"), Go's semantics.
//
// Chan<T> is a shared handle (an intrusive reference count) to a channel whose
// machinery is type-erased and lives in the library (src/sync/chan.cpp, select.cpp):
// this header only moves T values in and out through three functions per type
// (ElemOps). An unbuffered send hands the value straight to a waiting receiver's
// std::optional<T> (no buffer copy); a buffered channel keeps a FIFO ring; close wakes
// every waiter. A task that must wait parks (its thread runs other tasks); a thread
// that is not one of the runtime's blocks on a futex.
//
// select(cases...) polls the cases in a random order (so among ready cases each is
// chosen with equal probability), locks the channels in one global order (by address,
// the same channel once), and, if none is ready and there is no otherwise(), queues a
// waiter on every channel; the first peer to claim the select wins and the rest of its
// waiters are removed before select returns. Handlers run after every lock is dropped.
// A case (on_recv, on_send) holds a pointer to its channel, not a handle: building and
// running a select touches no reference count, so select(on_recv(ctx.done(), ...),
// otherwise(...)) on a live or a canceled context, from every P, writes no shared line.
//
// Beyond API.md: a nil channel (Chan<T>(nullptr) or Chan<T>::nil(), Go's nil chan:
// never ready, send/recv block forever, close throws std::logic_error), operator bool,
// operator==, const send/recv/try_send/try_recv/close (they change the channel, not the
// handle, and API.md's accessors hand out a const Chan<T>&), and capacity errors: a
// negative capacity throws std::invalid_argument
// ("corun::Chan: capacity -1 is negative; a capacity is 0 (unbuffered) or more") however
// it is spelled — any integer type, or a negative number already converted to std::size_t
// (a std::size_t above INT64_MAX counts as one: no such buffer exists); a capacity whose
// buffer would exceed 1 TiB throws std::length_error naming the largest accepted.
// T must be nothrow-move-constructible: a value moves between tasks under the channel's
// lock, where a throwing move would leave a half-delivered value.
// Rejected: std::shared_ptr for the handle (a control block and a second allocation);
// a fully templated channel (the select and park protocol would be instantiated per T
// and could not be reviewed, traced or profiled as one piece of the runtime).
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <corun/runtime.hpp>

namespace corun {

struct closed_channel : std::logic_error {
  using std::logic_error::logic_error;
};

template <class T>
class Chan;

namespace detail {

// How the library moves a T it knows only by address. Trivially copyable values (ints,
// pointers, small structs) are copied with memcpy of a known size, no indirect call.
struct ElemOps {
  std::size_t size;
  std::size_t align;
  bool trivial;                                      // trivially copyable and destructible
  void (*construct)(void* dst, void* src) noexcept;  // ::new (dst) T(std::move(*src))
  void (*destroy)(void* p) noexcept;                 // p->~T()
};

template <class T>
inline constexpr ElemOps elem_ops = {
    sizeof(T),
    alignof(T),
    std::is_trivially_copyable_v<T>&& std::is_trivially_destructible_v<T>,
    [](void* dst, void* src) noexcept { ::new (dst) T(std::move(*static_cast<T*>(src))); },
    [](void* p) noexcept { static_cast<T*>(p)->~T(); },
};

// Uninitialised storage for one received T: the library move-constructs into it.
template <class T>
struct RecvSlot {
  alignas(T) unsigned char bytes[sizeof(T)];
  void* raw() noexcept { return bytes; }
  std::optional<T> take(bool received) noexcept {
    if (!received) return std::nullopt;
    T* p = std::launder(reinterpret_cast<T*>(bytes));
    std::optional<T> r(std::move(*p));
    p->~T();
    return r;
  }
};

struct ChanWaiter;  // the library's (sync/chan_core.hpp): a parked sender or receiver

// Doubly linked FIFO of waiters, guarded by the channel's lock (the library's). head is
// atomic only so that the lock-free "would block" checks may peek at it; it changes only
// under the lock. The methods are the library's (sync/chan.cpp, chan_core.hpp).
struct WaitQueue {
  std::atomic<ChanWaiter*> head{nullptr};
  ChanWaiter* tail = nullptr;

  bool empty_hint() const noexcept { return head.load(std::memory_order_relaxed) == nullptr; }
  void push(ChanWaiter* w) noexcept;
  void unlink(ChanWaiter* w) noexcept;
  // Removes and returns the first waiter that can take part: a plain one, or one whose
  // select this call claims. Skipped select waiters are unlinked. nullptr if none.
  ChanWaiter* dequeue() noexcept;
  ChanWaiter* dequeue_slow() noexcept;
};

// The part of a channel that code inline in this header touches: the reference count,
// and what the lock-free "would block" checks read (recv_hint, send_would_block), so
// that select(one case, otherwise()) and try_* on a channel that would block, or a
// receive from a closed one, cost no call. The library's channel (sync/chan_core.hpp
// ChanCore) extends it with the lock, the ring and the rest; this part is its first
// cache line, so a check reads one line.
struct ChanHeader {
  // relaxed on copy (a handle already holds a reference); acq_rel on drop, so the last
  // owner sees every other owner's writes before it destroys the channel.
  std::atomic<std::size_t> refs{1};
  std::size_t cap = 0;  // immutable
  // count, closed and the queues change only under the channel's lock; the checks read
  // them without it (acquire: see recv_hint).
  std::atomic<std::size_t> count{0};  // buffered values
  std::atomic<bool> closed{false};
  WaitQueue recvq;  // parked receivers (and select cases receiving)
  WaitQueue sendq;  // parked senders
};

// Lock-free receive check, Go's chanrecv fast path: -1 would block (empty and open), 0
// closed and drained, 1 a value may be there (lock and look). Linearizable: "empty" then
// "open" means the channel was empty and open at the first load (a channel never
// reopens); if it was closed, the emptiness is checked again, since a value could have
// been buffered between the two loads and the channel closed after. Each load is acquire,
// so the later ones cannot be done before it. A nil channel always blocks.
inline int recv_hint(const ChanHeader* c) noexcept {
  if (!c) return -1;
  auto empty = [c] {
    return c->cap == 0 ? c->sendq.head.load(std::memory_order_acquire) == nullptr
                       : c->count.load(std::memory_order_acquire) == 0;
  };
  if (!empty()) return 1;
  if (!c->closed.load(std::memory_order_acquire)) return -1;
  return empty() ? 0 : 1;
}
// Lock-free send check, Go's chansend fast path: true if a send would block (open, then
// full: no receiver waits / the buffer is full; open at the second load too, as a channel
// never reopens). false: lock and look (room, or closed: the send throws). Nil: blocks.
inline bool send_would_block(const ChanHeader* c) noexcept {
  if (!c) return true;
  if (c->closed.load(std::memory_order_acquire)) return false;
  return c->cap == 0 ? c->recvq.head.load(std::memory_order_acquire) == nullptr
                     : c->count.load(std::memory_order_acquire) == c->cap;
}
// A check said "would block": a polling loop must not hold its P past its time slice.
inline void poll_missed() noexcept {
  if (preempt_hint.any.load(std::memory_order_relaxed)) [[unlikely]]
    poll_yield();
}

ChanHeader* chan_make(std::size_t capacity, const ElemOps* ops);
void chan_destroy(ChanHeader* c) noexcept;  // refs reached zero
void chan_send(ChanHeader* c, void* src);   // nil: blocks forever
bool chan_try_send(ChanHeader* c, void* src);
bool chan_recv(ChanHeader* c, void* dst);  // true: a T was move-constructed at dst
bool chan_try_recv(ChanHeader* c, void* dst);
// Non-blocking receive that tells the cases apart: 1 received, 0 closed and drained,
// -1 would block (Go's selectnbrecv; select(on_recv, otherwise) compiles to it).
int chan_poll_recv(ChanHeader* c, void* dst);
void chan_close(ChanHeader* c);
std::size_t chan_size(const ChanHeader* c) noexcept;
std::size_t chan_capacity(const ChanHeader* c) noexcept;
[[noreturn]] void throw_negative_capacity(long long capacity);

// One case of a select, as the library sees it. c == nullptr: never ready (nil channel,
// or the otherwise() case, which the template handles).
struct SelectCase {
  ChanHeader* c;
  void* elem;  // send: T* to move from; recv: raw storage to move-construct a T into
  bool send;
};
// Returns the index of the case that ran, or n if none was ready and !block. For a recv
// case, *received says whether a T was constructed in its elem (false: closed and
// drained). A send case on a closed channel throws closed_channel.
std::size_t select_impl(SelectCase* cases, std::size_t n, bool block, bool* received);

template <class T>
ChanHeader* header_of(const Chan<T>& ch) noexcept {
  return ch.c_;
}

// A case refers to its channel (API.md: for the duration of the select call only); it
// holds no handle, so building one touches no reference count.
template <class T, class F>
struct RecvCase {
  ChanHeader* c;  // nullptr: nil channel
  F f;
  RecvSlot<T> out;
};
template <class T, class F>
struct SendCase {
  ChanHeader* c;
  T v;
  F f;
};
template <class F>
struct DefaultCase {
  F f;
};

template <class C>
struct is_default_case : std::false_type {};
template <class F>
struct is_default_case<DefaultCase<F>> : std::true_type {};

template <class C>
void fill_case(C& c, SelectCase& s) {
  using D = std::remove_cvref_t<C>;
  if constexpr (is_default_case<D>::value) {
    s = {nullptr, nullptr, false};
  } else if constexpr (requires { c.out; }) {
    s = {c.c, c.out.raw(), false};
  } else {
    s = {c.c, &c.v, true};
  }
}

template <class C>
void run_case(C& c, bool received) {
  using D = std::remove_cvref_t<C>;
  if constexpr (is_default_case<D>::value) {
    c.f();
  } else if constexpr (requires { c.out; }) {
    auto v = c.out.take(received);
    if constexpr (std::is_invocable_v<decltype(c.f)&, decltype(std::move(v))>)
      c.f(std::move(v));
    else
      c.f();
  } else {
    c.f();
  }
}

}  // namespace detail

template <class T>
class Chan {
  static_assert(std::is_object_v<T> && !std::is_const_v<T> && !std::is_array_v<T>,
                "corun::Chan<T>: T must be a non-const object type");
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "corun::Chan<T>: T must be nothrow-move-constructible (a value is moved "
                "between tasks under the channel's lock)");

 public:
  // Throws std::invalid_argument for a capacity above INT64_MAX (a negative number converted
  // to std::size_t), std::length_error for a buffer over 1 TiB.
  explicit Chan(std::size_t capacity = 0) : c_(detail::chan_make(capacity, &detail::elem_ops<T>)) {}
  // Any integer type: Chan<int> c(0) must not be ambiguous with the nil constructor, and
  // a negative capacity is std::invalid_argument naming it, not a huge size_t.
  template <std::integral I>
  requires(!std::same_as<I, std::size_t> && !std::same_as<I, bool>) explicit Chan(I capacity)
      : c_(nullptr) {
    if constexpr (std::is_signed_v<I>)
      if (capacity < 0) detail::throw_negative_capacity(static_cast<long long>(capacity));
    c_ = detail::chan_make(static_cast<std::size_t>(capacity), &detail::elem_ops<T>);
  }
  // NOLINTNEXTLINE: nil channel, as Go's `var c chan T`
  constexpr Chan(std::nullptr_t) noexcept : c_(nullptr) {}
  static constexpr Chan nil() noexcept { return Chan(nullptr); }

  Chan(const Chan& o) noexcept : c_(o.c_) {
    if (c_) c_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  Chan(Chan&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
  Chan& operator=(const Chan& o) noexcept {
    Chan(o).swap(*this);
    return *this;
  }
  Chan& operator=(Chan&& o) noexcept {
    Chan(std::move(o)).swap(*this);
    return *this;
  }
  ~Chan() {
    if (c_ && c_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) detail::chan_destroy(c_);
  }
  void swap(Chan& o) noexcept { std::swap(c_, o.c_); }

  // const: an operation changes the channel, never the handle, so it works through the
  // const references Context::done() and Timer/Ticker::channel() return.
  void send(T v) const { detail::chan_send(c_, &v); }
  std::optional<T> recv() const {
    detail::RecvSlot<T> slot;
    return slot.take(detail::chan_recv(c_, slot.raw()));
  }
  bool try_send(T v) const {
    if (detail::send_would_block(c_)) {
      detail::poll_missed();
      return false;
    }
    return detail::chan_try_send(c_, &v);
  }
  std::optional<T> try_recv() const {
    const int r = detail::recv_hint(c_);
    if (r <= 0) {
      if (r < 0) detail::poll_missed();
      return std::nullopt;
    }
    detail::RecvSlot<T> slot;
    return slot.take(detail::chan_try_recv(c_, slot.raw()));
  }
  void close() const { detail::chan_close(c_); }
  std::size_t size() const { return detail::chan_size(c_); }
  std::size_t capacity() const { return detail::chan_capacity(c_); }

  explicit operator bool() const noexcept { return c_ != nullptr; }
  friend bool operator==(const Chan& a, const Chan& b) noexcept { return a.c_ == b.c_; }

 private:
  friend detail::ChanHeader* detail::header_of<T>(const Chan<T>&) noexcept;
  detail::ChanHeader* c_;  // nullptr: nil channel
};

// The case keeps a pointer to ch's channel, not a handle: ch must outlive the select
// (a temporary, as in on_recv(corun::after(d), f), lives to the end of the select's full
// expression).
namespace detail {
// The nil channel the accessors that return a const Chan<T>& hand out when their object
// has no channel (Context::background().done(), an after_func Timer's channel()).
// Constant-initialized: no guard on the read, usable from any static initializer.
template <class T>
inline constinit const Chan<T> nil_chan{nullptr};
}  // namespace detail

template <class T, class F>
auto on_recv(const Chan<T>& ch, F f) {
  return detail::RecvCase<T, F>{detail::header_of(ch), std::move(f), {}};
}

template <class T, class U, class F>
auto on_send(const Chan<T>& ch, U&& v, F f) {
  return detail::SendCase<T, F>{detail::header_of(ch), T(std::forward<U>(v)), std::move(f)};
}

template <class F>
auto otherwise(F f) {
  return detail::DefaultCase<F>{std::move(f)};
}

namespace detail {
// select(one channel case, otherwise()) is a non-blocking send or receive (as Go compiles
// it): no poll order, no lock order, and the lock-free "would block" check of try_*.
// Returns true if the channel case ran.
template <class C>
bool poll_case(C& c) {
  if constexpr (requires { c.out; }) {
    int r = recv_hint(c.c);
    if (r < 0) {
      poll_missed();
      return false;
    }
    if (r > 0 && (r = chan_poll_recv(c.c, c.out.raw())) < 0) return false;
    run_case(c, r == 1);
    return true;
  } else {
    if (send_would_block(c.c)) {
      poll_missed();
      return false;
    }
    if (!chan_try_send(c.c, &c.v)) return false;
    c.f();
    return true;
  }
}
}  // namespace detail

template <class... Cases>
std::size_t select(Cases&&... cases) {
  constexpr std::size_t n = sizeof...(Cases);
  constexpr std::size_t ndefault =
      (std::size_t{0} + ... + detail::is_default_case<std::remove_cvref_t<Cases>>::value);
  static_assert(ndefault <= 1, "corun::select: at most one otherwise() case");
  if constexpr (n == 2 && ndefault == 1) {
    auto one = [](auto& first, auto& second) -> std::size_t {
      if constexpr (detail::is_default_case<std::remove_cvref_t<decltype(first)>>::value) {
        if (detail::poll_case(second)) return 1;
        first.f();
        return 0;
      } else {
        if (detail::poll_case(first)) return 0;
        second.f();
        return 1;
      }
    };
    return one(cases...);
  } else {
    detail::SelectCase sc[n + 1];  // +1: select() with no case is legal (blocks forever)
    std::size_t def = n;
    {
      std::size_t i = 0;
      ((detail::fill_case(cases, sc[i]),
        def = detail::is_default_case<std::remove_cvref_t<Cases>>::value ? i : def, ++i),
       ...);
    }
    bool received = false;
    std::size_t chosen = detail::select_impl(sc, n, ndefault == 0, &received);
    if (chosen == n) chosen = def;
    {
      std::size_t i = 0;
      ((i++ == chosen ? detail::run_case(cases, received) : void()), ...);
    }
    return chosen;
  }
}

}  // namespace corun
