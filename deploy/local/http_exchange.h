#pragma once
// One HTTP/1.1 request over a fresh loopback connection, read to the server's close, and the
// pieces of its answer: what the fault suite and the soak tool need to judge how a response
// ended (complete, cut, never finished), which a higher-level client would hide.
#include <chrono>
#include <functional>
#include <string>

namespace ft::local {

struct HttpExchange {
  bool connected = false;  // a connection was made at all
  bool closed = false;     // the server closed it (false: timed out first)
  std::string raw;         // every byte received
  int status() const;                // from the status line; 0 without one
  bool has_head() const;             // the header block ended
  // The de-chunked body; `complete` says whether the zero-length last chunk came (a chunked
  // body without it was cut). Bodies that are not chunked are returned as they are, complete.
  std::string body(bool* complete) const;
};

// POSTs `body` (JSON) to http://127.0.0.1:port/path with Connection: close and reads until the
// server closes or timeout passes; on_data, when given, is called after every read with all that
// came so far.
HttpExchange http_exchange(int port, const std::string& method, const std::string& path, const std::string& body,
                           std::chrono::milliseconds timeout,
                           const std::function<void(const std::string&)>& on_data = {});

}  // namespace ft::local
