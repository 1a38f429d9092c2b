#include "deploy/local/http_exchange.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>

namespace ft::local {

int HttpExchange::status() const {
  return raw.size() > 12 && raw.compare(0, 9, "HTTP/1.1 ") == 0 ? std::atoi(raw.c_str() + 9) : 0;
}

bool HttpExchange::has_head() const { return raw.find("\r\n\r\n") != std::string::npos; }

std::string HttpExchange::body(bool* complete) const {
  const size_t head_end = raw.find("\r\n\r\n");
  *complete = false;
  if (head_end == std::string::npos) return {};
  std::string head = raw.substr(0, head_end);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (head.find("transfer-encoding: chunked") == std::string::npos) {
    *complete = true;
    return raw.substr(head_end + 4);
  }
  std::string data;
  size_t pos = head_end + 4;
  while (pos < raw.size()) {
    const size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t len = std::strtoul(raw.substr(pos, eol - pos).c_str(), nullptr, 16);
    if (len == 0) {
      *complete = true;
      break;
    }
    if (eol + 2 + len > raw.size()) break;
    data.append(raw, eol + 2, len);
    pos = eol + 2 + len + 2;
  }
  return data;
}

HttpExchange http_exchange(int port, const std::string& method, const std::string& path, const std::string& body,
                           std::chrono::milliseconds timeout, const std::function<void(const std::string&)>& on_data) {
  HttpExchange ex;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0) ::close(fd);
    return ex;
  }
  ex.connected = true;
  const std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  const auto until = std::chrono::steady_clock::now() + timeout;
  char buf[16384];
  while (!ex.closed && std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      ex.closed = true;
    } else {
      ex.raw.append(buf, size_t(n));
      if (on_data) on_data(ex.raw);
    }
  }
  ::close(fd);
  return ex;
}

}  // namespace ft::local
