#include "gateway/http_server.h"

#include <algorithm>
#include <cctype>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <limits>
#include <random>
#include <stdexcept>

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "gateway/api_error.h"
#include "gateway/endpoints.h"
#include "gateway/http_request_parse.h"

namespace ft::gateway {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

auto token(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

// What every session shares with the server: the draining switch, counters for the connection
// limit and for the drain's wait, and the name this instance answers with.
struct ServerState {
  std::atomic<bool> draining{false};
  std::atomic<int> connections{0};
  std::atomic<int> in_flight{0};
  // X-Flashtier-Instance: which of several gateways behind one port answered (compose --scale,
  // Kubernetes replicas); the host name is the container's or pod's name.
  std::string instance;
};

// HOST:PID:RANDOM. The random part is needed: gateways sharing one network namespace (compose's
// `network_mode: service:http-front`) share the host name too, and each is PID 1 of its own PID
// namespace.
std::string instance_name() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  char tag[16];
  std::snprintf(tag, sizeof tag, "%08x", static_cast<unsigned>(std::random_device{}()));
  return std::string(host) + ":" + std::to_string(getpid()) + ":" + tag;
}

class BeastExchange final : public HttpExchange {
 public:
  BeastExchange(beast::tcp_stream& stream, HttpRequest req, unsigned version, bool keep_alive, const std::string& instance)
      : stream_(stream), req_(std::move(req)), version_(version), keep_alive_(keep_alive), instance_(instance),
        read_done_(stream.get_executor()) {}

  const HttpRequest& request() const override { return req_; }
  asio::any_io_executor executor() const override { return stream_.get_executor(); }
  bool responded() const override { return responded_; }
  bool closing() const { return closing_ || !keep_alive_; }
  bool client_gone() const override { return gone_; }

  asio::awaitable<void> respond(int status, std::string_view content_type, std::string body,
                                std::vector<std::pair<std::string, std::string>> extra) override {
    http::response<http::string_body> res{static_cast<http::status>(status), version_};
    res.set(http::field::server, "flashtier-gateway");
    res.set("X-Flashtier-Instance", instance_);
    res.set(http::field::content_type, content_type);
    for (auto& [k, v] : extra) res.set(k, v);
    res.keep_alive(keep_alive_ && !closing_);
    if (req_.method != "HEAD") res.body() = std::move(body);
    res.prepare_payload();
    responded_ = true;
    error_code ec;
    co_await http::async_write(stream_, res, token(ec));
    if (ec || !res.keep_alive()) closing_ = true;
  }

  asio::awaitable<bool> begin_events() override {
    http::response<http::empty_body> res{http::status::ok, version_};
    res.set(http::field::server, "flashtier-gateway");
    res.set(http::field::content_type, "text/event-stream");
    res.set("X-Flashtier-Instance", instance_);
    res.set(http::field::cache_control, "no-cache");
    res.set("X-Accel-Buffering", "no");
    res.chunked(true);
    res.keep_alive(false);  // one stream per connection (toolchain.md P8)
    responded_ = true;
    closing_ = true;
    http::response_serializer<http::empty_body> sr{res};
    error_code ec;
    co_await http::async_write_header(stream_, sr, token(ec));
    co_return !ec;
  }

  asio::awaitable<bool> write(std::string data) override {
    if (data.empty()) co_return true;
    error_code ec;
    co_await asio::async_write(stream_, http::make_chunk(asio::buffer(data)), token(ec));
    co_return !ec;
  }

  asio::awaitable<void> end_events() override {
    error_code ec;
    co_await asio::async_write(stream_, http::make_chunk_last(), token(ec));
  }

  void watch_disconnect(std::function<void()> on_gone) override {
    on_gone_ = std::move(on_gone);
    watching_ = true;
    if (!wait_pending_) arm();
  }

  asio::awaitable<void> unwatch_disconnect() override {
    watching_ = false;
    on_gone_ = nullptr;
    if (!wait_pending_) co_return;
    error_code ec;
    stream_.socket().cancel(ec);
    read_done_.expires_at(asio::steady_timer::time_point::max());
    co_await read_done_.async_wait(token(ec));
  }

 private:
  // A wait for readability runs beside the response: it completes when the peer closes (EOF or
  // reset) and then fires on_gone at once, whatever the generation is doing.
  void arm() {
    wait_pending_ = true;
    stream_.socket().async_wait(tcp::socket::wait_read, [this](error_code ec) {
      wait_pending_ = false;
      if (!watching_) {
        read_done_.cancel();
        return;
      }
      // Readiness is only a hint: the reactor also completes the wait on a stale edge-triggered
      // event (request bytes that arrived, were reported, and were read before the report was
      // handled). A peek tells EOF (0), an error, new bytes and nothing (EAGAIN: wait again).
      ssize_t n = -1;  // a failed wait counts as gone
      if (!ec) {
        char c;
        n = ::recv(stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          arm();
          return;
        }
      }
      if (n <= 0) {
        gone_ = true;
        watching_ = false;
        closing_ = true;
        if (auto f = std::move(on_gone_)) f();
        return;
      }
      // Bytes of a pipelined request: leave them for the next read; stop watching.
      watching_ = false;
    });
  }

  beast::tcp_stream& stream_;
  HttpRequest req_;
  unsigned version_;
  bool keep_alive_;
  const std::string& instance_;
  bool responded_ = false;
  bool closing_ = false;
  bool watching_ = false;
  bool wait_pending_ = false;
  bool gone_ = false;
  std::function<void()> on_gone_;
  asio::steady_timer read_done_;
};

std::string endpoint_label(const std::string& path) {
  static const char* known[] = {"/v1/chat/completions", "/v1/completions", "/generate", "/tokenize", "/detokenize",
                                "/v1/models", "/health", "/metrics", "/server_info", "/get_server_info",
                                "/get_model_info", "/health_generate", "/v1/tokenize", "/v1/detokenize"};
  for (const char* k : known)
    if (path == k) return k;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

ApiError request_error(int status, size_t limit, const std::string& detail = {}) {
  switch (status) {
    case 413:
      return ApiError{413, "request body is larger than the limit of " + std::to_string(limit) + " bytes", "", "invalid_request_error",
                      "request_too_large"};
    case 431: return ApiError{431, "request headers are too large", "", "invalid_request_error", "headers_too_large"};
    case 400: return ApiError{400, "malformed HTTP request: " + detail, "", "invalid_request_error", "bad_http"};
    case 503: return ApiError{503, detail, "", "server_error", "unavailable"};
    default: return ApiError{500, "internal error: " + detail, "", "server_error", "internal"};
  }
}

asio::awaitable<void> write_plain_error(beast::tcp_stream& stream, unsigned version, const ApiError& e) {
  http::response<http::string_body> res{static_cast<http::status>(e.status), version};
  res.set(http::field::server, "flashtier-gateway");
  if (e.status == 503) res.set(http::field::retry_after, "1");
  res.set(http::field::content_type, "application/json");
  res.keep_alive(false);
  res.body() = error_json(e);
  res.prepare_payload();
  error_code ec;
  co_await http::async_write(stream, res, token(ec));
}

// Counts a connection for --max-connections for as long as the session lives.
struct ConnectionSlot {
  explicit ConnectionSlot(ServerState& s) : st(s), count(s.connections.fetch_add(1) + 1) {}
  ~ConnectionSlot() { st.connections.fetch_sub(1); }
  ServerState& st;
  int count;
};

asio::awaitable<void> session(App& app, ServerState& st, tcp::socket socket) {
  error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  ConnectionSlot slot(st);
  if (slot.count > app.opts.max_connections) {
    // Over the limit: a clear answer instead of a silent reset, then close at once.
    app.metrics.count_request("other", 503);
    const ApiError full = request_error(503, 0, "too many connections (the limit is " + std::to_string(app.opts.max_connections) +
                                                    "); retry later");
    stream.expires_after(std::chrono::seconds(5));
    co_await write_plain_error(stream, 11, full);
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream.close();
    co_return;
  }
  app.metrics.http_connections.fetch_add(1);
  for (;;) {
    RequestParser parser;
    limit_request_parser(parser, app.opts.max_body_bytes);
    // Headers (and the idle wait before them) have their own, shorter limit than the body, so a
    // client dribbling header bytes cannot hold a connection for the whole request timeout.
    stream.expires_after(std::chrono::seconds(app.opts.header_timeout_s));
    co_await http::async_read_header(stream, buffer, parser, token(ec));
    if (!ec && !parser.is_done()) {
      stream.expires_after(std::chrono::seconds(app.opts.request_timeout_s));
      // Clients that ask first (curl does for bodies over 1 MiB) would otherwise wait a second.
      if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        http::response<http::empty_body> go_on{http::status::continue_, parser.get().version()};
        error_code wec;
        co_await http::async_write(stream, go_on, token(wec));
      }
      co_await http::async_read(stream, buffer, parser, token(ec));
    }
    // (Errors are named locals: GCC 12 double-destroys brace-built temporaries in co_await
    // expressions.)
    if (ec == http::error::body_limit) {
      app.metrics.count_request("other", 413);
      const ApiError too_large = request_error(413, app.opts.max_body_bytes);
      co_await write_plain_error(stream, 11, too_large);
      break;
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
      break;
    if (ec) {
      const ApiError bad = request_error(parse_error_status(ec), 0, ec.message());
      if (ec == http::error::header_limit || buffer.size() > 0 || parser.got_some()) co_await write_plain_error(stream, 11, bad);
      break;
    }
    stream.expires_never();
    auto& msg = parser.get();
    HttpRequest req = to_http_request(msg);
    if (st.draining.load() && req.path != "/metrics") {
      // Draining: /health says so (load balancers and readiness probes take this instance out)
      // and new work is refused with a reason; requests already running are not touched.
      app.metrics.count_request(endpoint_label(req.path), 503);
      const ApiError draining = request_error(503, 0, "the server is shutting down (draining); retry the request");
      co_await write_plain_error(stream, msg.version(), draining);
      break;
    }
    BeastExchange ex(stream, std::move(req), msg.version(), msg.keep_alive(), st.instance);
    int status = 500;
    std::string failure;
    st.in_flight.fetch_add(1);
    try {
      status = co_await handle_request(app, ex);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    // A handler that threw may have left the disconnect watch armed; its completion refers to
    // `ex`, which ends with this iteration. (A no-op when nothing is pending.)
    co_await ex.unwatch_disconnect();
    if (!failure.empty()) {  // (no co_await inside a handler)
      status = 500;
      if (!ex.responded()) {
        std::string body = error_json(request_error(500, 0, failure));
        co_await ex.respond(500, "application/json", std::move(body), {});
      }
    }
    st.in_flight.fetch_sub(1);
    app.metrics.count_request(endpoint_label(ex.request().path), status);
    if (ex.closing() || ex.client_gone() || st.draining.load()) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.close();
  app.metrics.http_connections.fetch_sub(1);
}

}  // namespace

struct HttpServer::Impl {
  Impl(App& a, asio::io_context& i) : app(a), ioc(i), acceptor(i) { state.instance = instance_name(); }
  App& app;
  asio::io_context& ioc;
  tcp::acceptor acceptor;
  ServerState state;

  asio::awaitable<void> accept_loop() {
    for (;;) {
      tcp::socket sock(asio::make_strand(ioc));
      error_code ec;
      co_await acceptor.async_accept(sock, token(ec));
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) continue;  // e.g. EMFILE: keep serving the others
      auto ex = sock.get_executor();
      asio::co_spawn(ex, session(app, state, std::move(sock)), asio::detached);
    }
  }
};

HttpServer::HttpServer(App& app, asio::io_context& ioc) : impl_(std::make_unique<Impl>(app, ioc)) {}
HttpServer::~HttpServer() = default;

unsigned short HttpServer::listen(const std::string& host, int port) {
  auto addr = asio::ip::make_address(host);
  tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  auto& a = impl_->acceptor;
  a.open(ep.protocol());
  a.set_option(asio::socket_base::reuse_address(true));
  if (impl_->app.opts.reuse_port) {
    // Several gateways in one network namespace bind the same port; the kernel spreads new
    // connections over them (deploy/docker-compose.yml runs scaled gateways this way).
    const int one = 1;
    if (::setsockopt(a.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
      throw std::runtime_error(std::string("SO_REUSEPORT: ") + std::strerror(errno));
  }
  a.bind(ep);
  a.listen(asio::socket_base::max_listen_connections);
  return a.local_endpoint().port();
}

void HttpServer::start() { asio::co_spawn(impl_->acceptor.get_executor(), impl_->accept_loop(), asio::detached); }

void HttpServer::stop() {
  error_code ec;
  impl_->acceptor.close(ec);
}

void HttpServer::begin_drain() { impl_->state.draining.store(true); }
bool HttpServer::draining() const { return impl_->state.draining.load(); }
int HttpServer::in_flight() const { return impl_->state.in_flight.load(); }

}  // namespace ft::gateway
