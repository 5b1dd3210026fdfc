// net/addr.hpp — "host:port" strings to socket addresses and back.
//
// Accepted: an IPv4 literal ("127.0.0.1:80"), a bracketed IPv6 literal ("[::1]:80",
// "[fe80::1%lo]:80"), a name getaddrinfo resolves ("localhost:80"), or an empty host
// (":80": every local address when listening, the local system when dialing). The port
// is a decimal number from 0 to 65535; 0 only when listening. Anything else throws
// std::invalid_argument naming the string and what is accepted. Literals never reach
// getaddrinfo; a name is resolved inside blocking() (getaddrinfo blocks its thread).
// Rejected: service names for ports ("http"): Go accepts them, but a server config with
// "localhost:http" is rare and the lookup reads /etc/services on every dial.
#pragma once

#include <sys/socket.h>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace corun::net::detail {

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family() const noexcept { return ss.ss_family; }
};

// Splits and resolves host_port. listening: port 0 allowed, empty host = the wildcard.
// Every result has the port set. Throws std::invalid_argument (malformed), or
// std::system_error in gai_category() when a name does not resolve.
std::vector<SockAddr> resolve(std::string_view host_port, bool listening);

// "127.0.0.1:8080" or "[::1]:8080".
std::string format(const sockaddr* sa, socklen_t len);

// The category of getaddrinfo's EAI_* codes.
const std::error_category& gai_category() noexcept;

}  // namespace corun::net::detail
