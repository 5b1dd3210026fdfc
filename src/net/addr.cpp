// net/addr.cpp — parsing and resolving "host:port" (contract: addr.hpp).
#include "net/addr.hpp"

#include <arpa/inet.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <cstring>
#include <stdexcept>

#include <corun/runtime.hpp>

namespace corun::net::detail {

namespace {

[[noreturn]] void malformed(std::string_view host_port, const char* why) {
  throw std::invalid_argument("corun::net: address \"" + std::string(host_port) + "\": " + why +
                              "; expected host:port with an IPv4 literal, a bracketed IPv6 "
                              "literal ([::1]:80) or a name, and a port from 0 to 65535");
}

class GaiCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "getaddrinfo"; }
  std::string message(int code) const override { return gai_strerror(code); }
};

}  // namespace

const std::error_category& gai_category() noexcept {
  static const GaiCategory c;
  return c;
}

std::vector<SockAddr> resolve(std::string_view host_port, bool listening) {
  std::string_view host, port;
  if (!host_port.empty() && host_port.front() == '[') {
    auto close = host_port.find(']');
    if (close == std::string_view::npos) malformed(host_port, "missing ']'");
    host = host_port.substr(1, close - 1);
    if (close + 1 >= host_port.size() || host_port[close + 1] != ':')
      malformed(host_port, "missing port after ']'");
    port = host_port.substr(close + 2);
    if (host.find(':') == std::string_view::npos)
      malformed(host_port, "brackets around a non-IPv6 host");
  } else {
    auto colon = host_port.rfind(':');
    if (colon == std::string_view::npos) malformed(host_port, "missing port");
    host = host_port.substr(0, colon);
    port = host_port.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      malformed(host_port, "too many colons (bracket an IPv6 literal)");
  }
  if (port.empty() || port.size() > 5) malformed(host_port, "bad port");
  unsigned p = 0;
  for (char c : port) {
    if (c < '0' || c > '9') malformed(host_port, "bad port");
    p = p * 10 + static_cast<unsigned>(c - '0');
  }
  if (p > 65535) malformed(host_port, "port out of range");
  if (p == 0 && !listening) malformed(host_port, "port 0 (only listen picks a free port)");
  if (host.find('\0') != std::string_view::npos) malformed(host_port, "NUL in host");

  const std::uint16_t nport = htons(static_cast<std::uint16_t>(p));
  std::vector<SockAddr> out;
  SockAddr a;
  std::string h(host);
  if (h.empty()) {
    if (listening) {  // every address, both families where the kernel allows
      auto* s6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
      s6->sin6_family = AF_INET6;
      s6->sin6_addr = in6addr_any;
      s6->sin6_port = nport;
      a.len = sizeof(sockaddr_in6);
      out.push_back(a);
      SockAddr b;
      auto* s4 = reinterpret_cast<sockaddr_in*>(&b.ss);
      s4->sin_family = AF_INET;
      s4->sin_addr.s_addr = htonl(INADDR_ANY);
      s4->sin_port = nport;
      b.len = sizeof(sockaddr_in);
      out.push_back(b);
      return out;
    }
    h = "127.0.0.1";  // Go dials the local system
  }
  auto* s4 = reinterpret_cast<sockaddr_in*>(&a.ss);
  if (inet_pton(AF_INET, h.c_str(), &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = nport;
    a.len = sizeof(sockaddr_in);
    out.push_back(a);
    return out;
  }
  std::string zone;
  if (auto pct = h.find('%'); pct != std::string::npos) {
    zone = h.substr(pct + 1);
    h.resize(pct);
  }
  auto* s6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
  if (inet_pton(AF_INET6, h.c_str(), &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = nport;
    if (!zone.empty()) {
      unsigned idx = if_nametoindex(zone.c_str());
      if (idx == 0) malformed(host_port, "unknown IPv6 zone");
      s6->sin6_scope_id = idx;
    }
    a.len = sizeof(sockaddr_in6);
    out.push_back(a);
    return out;
  }
  if (!zone.empty() || host_port.front() == '[') malformed(host_port, "bad IPv6 literal");
  // A name: getaddrinfo blocks its thread (DNS, /etc/hosts), so it runs in blocking().
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG | (listening ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  int rc = corun::blocking([&] { return getaddrinfo(h.c_str(), nullptr, &hints, &res); });
  if (rc != 0) throw std::system_error(rc, gai_category(), "corun::net: lookup \"" + h + "\"");
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    SockAddr r;
    std::memcpy(&r.ss, ai->ai_addr, ai->ai_addrlen);
    r.len = ai->ai_addrlen;
    if (ai->ai_family == AF_INET)
      reinterpret_cast<sockaddr_in*>(&r.ss)->sin_port = nport;
    else
      reinterpret_cast<sockaddr_in6*>(&r.ss)->sin6_port = nport;
    out.push_back(r);
  }
  freeaddrinfo(res);
  if (out.empty())
    throw std::system_error(EAI_NONAME, gai_category(), "corun::net: lookup \"" + h + "\"");
  return out;
}

std::string format(const sockaddr* sa, socklen_t len) {
  char buf[INET6_ADDRSTRLEN + 16];
  if (sa->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    auto* s4 = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &s4->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(s4->sin_port));
  }
  if (sa->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    auto* s6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &s6->sin6_addr, buf, sizeof buf);
    std::string h(buf);
    if (s6->sin6_scope_id != 0) {
      char ifname[IF_NAMESIZE];
      if (if_indextoname(s6->sin6_scope_id, ifname))
        h += std::string("%") + ifname;
      else
        h += "%" + std::to_string(s6->sin6_scope_id);
    }
    return "[" + h + "]:" + std::to_string(ntohs(s6->sin6_port));
  }
  return "";
}

}  // namespace corun::net::detail
