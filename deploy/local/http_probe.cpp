#include "deploy/local/http_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace ft::local {

int http_get_status(const std::string& host, int port, const std::string& path, std::chrono::milliseconds timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    close(fd);
    return -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto wait_for = [&](short events) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    return poll(&p, 1, static_cast<int>(left.count())) == 1 && (p.revents & events);
  };
  int status = -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 || (errno == EINPROGRESS && wait_for(POLLOUT))) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    const std::string req = "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
    if (err == 0 && send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      std::string resp;
      char buf[512];
      while (resp.find("\r\n") == std::string::npos && wait_for(POLLIN)) {
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        resp.append(buf, static_cast<size_t>(n));
      }
      // "HTTP/1.1 200 OK"
      if (resp.rfind("HTTP/1.", 0) == 0 && resp.size() >= 12) status = std::atoi(resp.c_str() + 9);
    }
  }
  close(fd);
  return status;
}

}  // namespace ft::local
