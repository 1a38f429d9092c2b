// flashtier-gateway: OpenAI-compatible (and SGLang-shaped) HTTP/SSE front end for gpu-workers.
// SIGTERM/SIGINT drain: /health and new requests answer 503, requests in flight run to their end
// for up to --drain-timeout seconds, then the process exits 0. A second signal exits at once.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <thread>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/app.h"
#include "gateway/http_server.h"

int main(int argc, char** argv) {
  using namespace ft::gateway;
  App app;
  try {
    app.opts = parse_options(argc, argv);
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()) == "help") {
      std::cout << usage_text();
      return 0;
    }
    std::cerr << "flashtier-gateway: " << e.what() << "\n" << usage_text();
    return 2;
  }
  try {
    app.opts.api_key = resolve_api_key(app.opts);
  } catch (const std::invalid_argument& e) {
    std::cerr << "flashtier-gateway: " << e.what() << "\n";
    return 2;
  }
  if (!app.opts.api_key_file.empty() && app.opts.api_key.empty())
    std::cerr << "flashtier-gateway: warning: " << app.opts.api_key_file << " is empty: no API key is required\n";
  try {
    app.model = ModelContext::load(app.opts.model_dir, app.opts.served_model_name);
  } catch (const std::exception& e) {
    std::cerr << "flashtier-gateway: " << e.what() << "\n";
    return 1;
  }
  if (!app.model->has_chat_template())
    std::cerr << "flashtier-gateway: warning: chat completions disabled: " << app.model->chat_template_error() << "\n";
  WorkerPoolOptions po;
  po.dns_names = app.opts.worker_dns;
  po.dns_interval = std::chrono::milliseconds(app.opts.dns_interval_ms);
  po.request_deadline = std::chrono::seconds(app.opts.request_deadline_s);
  po.tls_ca = app.opts.worker_tls_ca;
  po.tls_cert = app.opts.worker_tls_cert;
  po.tls_key = app.opts.worker_tls_key;
  po.tls_name = app.opts.worker_tls_name;
  try {
    app.pool = std::make_unique<WorkerPool>(app.opts.workers, std::chrono::milliseconds(app.opts.health_interval_ms), po);
  } catch (const std::exception& e) {
    std::cerr << "flashtier-gateway: " << e.what() << "\n";
    return 2;
  }
  app.pool->start();

  boost::asio::io_context ioc(app.opts.threads);
  HttpServer server(app, ioc);
  unsigned short port = 0;
  try {
    port = server.listen(app.opts.host, app.opts.port);
  } catch (const std::exception& e) {
    std::cerr << "flashtier-gateway: cannot listen on " << app.opts.host << ":" << app.opts.port << ": " << e.what() << "\n";
    return 1;
  }
  server.start();
  boost::asio::signal_set signals(ioc, SIGINT, SIGTERM);
  boost::asio::steady_timer drain_timer(ioc);
  const auto drain_deadline = std::make_shared<std::chrono::steady_clock::time_point>();
  // Polls the in-flight count every 50 ms until it is zero or the drain timeout has passed. At
  // the timeout the streams still running are ended with an error event and [DONE] (so no client
  // sees a cut connection), and get 2 s more to write it.
  bool aborted = false;
  std::function<void()> drain_check = [&] {
    const auto now = std::chrono::steady_clock::now();
    if (!aborted && server.in_flight() > 0 && now >= *drain_deadline) {
      aborted = true;
      std::fprintf(stderr, "flashtier-gateway: drain timeout: ending %d request(s) with an error\n", server.in_flight());
      app.pool->abort_all("the gateway is shutting down and its drain timeout (" + std::to_string(app.opts.drain_timeout_s) +
                          " s) has passed; retry the request");
      *drain_deadline = now + std::chrono::seconds(2);
    }
    if (server.in_flight() == 0 || (aborted && now >= *drain_deadline)) {
      std::fprintf(stderr, "flashtier-gateway: drained (%d request(s) still in flight); exiting\n", server.in_flight());
      server.stop();
      ioc.stop();
      return;
    }
    drain_timer.expires_after(std::chrono::milliseconds(50));
    drain_timer.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) drain_check();
    });
  };
  std::function<void(const boost::system::error_code&, int)> on_signal = [&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (server.draining()) {  // a second signal: stop now
      std::fprintf(stderr, "flashtier-gateway: signal %d while draining: exiting now\n", sig);
      server.stop();
      ioc.stop();
      return;
    }
    std::fprintf(stderr, "flashtier-gateway: signal %d: draining (%d request(s) in flight, up to %d s)\n", sig,
                 server.in_flight(), app.opts.drain_timeout_s);
    server.begin_drain();
    *drain_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(app.opts.drain_timeout_s);
    drain_check();
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  std::printf("flashtier-gateway: listening on http://%s:%u (model '%s', %zu worker(s))\n", app.opts.host.c_str(), port,
              app.model->served_name().c_str(), app.opts.workers.size());
  std::fflush(stdout);

  std::vector<std::thread> threads;
  for (int i = 1; i < app.opts.threads; ++i) threads.emplace_back([&] { ioc.run(); });
  ioc.run();
  for (auto& t : threads) t.join();
  app.pool->stop();
  std::fflush(stdout);
  // gRPC callbacks of cancelled streams may still be in flight; they post into the io_context,
  // so leave without running destructors.
  _exit(0);
}
