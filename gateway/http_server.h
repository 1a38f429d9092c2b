#pragma once
// The HTTP/1.1 server: accept loop, one coroutine per connection on its own strand, request
// parsing with size and time limits (413 for bodies over --max-body-bytes), and the Beast
// implementation of HttpExchange. The only translation unit that includes Beast.
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ft::gateway
