// Arbitrary bytes as what a client sends on one keep-alive connection: requests are read one
// after another, each by a fresh parser with the gateway's limits (gateway/http_request_parse.h),
// exactly as http_server.cpp reads them, until one fails or the connection would close. A parse
// error must map to 400/413/431; a parsed request must come out as a consistent HttpRequest.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <boost/asio/buffer.hpp>

#include "gateway/http_request_parse.h"

namespace http = boost::beast::http;
using ft::gateway::HttpRequest;

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t off = 0;
  for (int n = 0; n < 16; ++n) {
    ft::gateway::RequestParser p;
    // A small body limit, so 413 is reachable from short inputs.
    ft::gateway::limit_request_parser(p, 4096);
    boost::system::error_code ec;
    for (;;) {
      const size_t used = p.put(boost::asio::buffer(data + off, size - off), ec);
      check(used <= size - off);
      off += used;
      if (ec != http::error::need_more) break;
      ec = {};
      if (used > 0 && off < size) continue;
      // The client stopped sending: end of stream.
      if (p.got_some()) p.put_eof(ec);
      else return 0;
      break;
    }
    if (ec) {
      const int status = ft::gateway::parse_error_status(ec);
      check(status == 400 || status == 413 || status == 431);
      return 0;  // the server answers and closes
    }
    if (!p.is_done()) return 0;
    const bool keep_alive = p.get().keep_alive();
    const uint64_t body_bytes = p.get().body().size();
    HttpRequest r = ft::gateway::to_http_request(p.get());
    check(r.body.size() == body_bytes && body_bytes <= 4096);
    check(r.path.size() <= r.target.size() && r.target.compare(0, r.path.size(), r.path) == 0);
    check(r.path.find('?') == std::string::npos);
    for (const auto& [k, v] : r.headers) check(r.header(k).size() <= ft::gateway::kMaxHeaderBytes);
    (void)r.header("content-type");
    if (!keep_alive || off >= size) return 0;
  }
  return 0;
}
