#pragma once
// One HTTP request/response as the endpoint code sees it; http_server.cpp implements it with
// Boost.Beast so that no other translation unit includes Beast. Everything runs on the
// connection's strand.
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "gateway/http_request.h"

namespace ft::gateway {

namespace asio = boost::asio;

class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual const HttpRequest& request() const = 0;
  virtual asio::any_io_executor executor() const = 0;

  // A complete response. Extra headers are (name, value) pairs.
  virtual asio::awaitable<void> respond(int status, std::string_view content_type, std::string body,
                                        std::vector<std::pair<std::string, std::string>> extra = {}) = 0;
  // Server-sent events: headers now (chunked, Connection: close), then write() per batch of
  // events. Both return false when the client has gone away.
  virtual asio::awaitable<bool> begin_events() = 0;
  virtual asio::awaitable<bool> write(std::string data) = 0;
  virtual asio::awaitable<void> end_events() = 0;
  virtual bool responded() const = 0;  // headers were sent

  // Calls on_gone (on the strand) when the client closes the connection while the request is
  // being served; a concurrent read, so no check sits between token events.
  virtual void watch_disconnect(std::function<void()> on_gone) = 0;
  // Stops watching; returns once the pending read has completed.
  virtual asio::awaitable<void> unwatch_disconnect() = 0;
  virtual bool client_gone() const = 0;
};

}  // namespace ft::gateway
