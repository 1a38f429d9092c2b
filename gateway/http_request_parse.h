#pragma once
// How the gateway reads one HTTP/1.1 request, apart from the socket: the parser's limits, the
// status a parse error gets, and the parsed message as the endpoints' HttpRequest.
// http_server.cpp reads connections with these; fuzz/fuzz_http_request.cpp feeds arbitrary bytes
// through the same code.
#include <cstdint>
#include <string>

#include <boost/beast/http.hpp>

#include "gateway/http_request.h"

namespace ft::gateway {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Headers beyond this get 431 (a client cannot make the gateway buffer more of them).
constexpr uint64_t kMaxHeaderBytes = 64 * 1024;

inline void limit_request_parser(RequestParser& p, uint64_t max_body_bytes) {
  p.body_limit(max_body_bytes);
  p.header_limit(static_cast<std::uint32_t>(kMaxHeaderBytes));
}

// 413 for a body over the limit, 431 for headers over theirs, 400 for anything else malformed.
inline int parse_error_status(const boost::system::error_code& ec) {
  namespace http = boost::beast::http;
  if (ec == http::error::body_limit) return 413;
  if (ec == http::error::header_limit) return 431;
  return 400;
}

// Takes the body out of `msg`.
inline HttpRequest to_http_request(boost::beast::http::request<boost::beast::http::string_body>& msg) {
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = req.target.substr(0, req.target.find('?'));
  for (const auto& f : msg) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  req.body = std::move(msg.body());
  return req;
}

}  // namespace ft::gateway
