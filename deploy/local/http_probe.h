#pragma once
// A minimal HTTP/1.1 GET over loopback for health probes: no library needed for one request.
#include <chrono>
#include <string>

namespace ft::local {

// Status code of GET http://host:port/path, or −1 when nothing answered within `timeout`.
int http_get_status(const std::string& host, int port, const std::string& path, std::chrono::milliseconds timeout);

}  // namespace ft::local
