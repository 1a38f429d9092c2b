#pragma once
// The HTTP/1.1 server: accept loop, one coroutine per connection on its own strand, request
// parsing with size and time limits (413 for bodies over --max-body-bytes, --header-timeout-s,
// --request-timeout-s for the body), the connection limit (--max-connections: 503), draining, and
// the Beast implementation of HttpExchange. The only translation unit that includes Beast.
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "gateway/app.h"

namespace ft::gateway {

class HttpServer {
 public:
  HttpServer(App& app, boost::asio::io_context& ioc);
  ~HttpServer();
  // Binds and listens; returns the bound port (useful with port 0). Throws on failure.
  unsigned short listen(const std::string& host, int port);
  void start();  // spawns the accept loop on the io_context
  void stop();   // closes the listening socket

  // Draining (SIGTERM): from now on /health answers 503 and every new request 503 with an
  // OpenAI error ("the server is shutting down"); requests already being served run on.
  void begin_drain();
  bool draining() const;
  int in_flight() const;  // requests being served (a stream counts until its last byte)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ft::gateway
