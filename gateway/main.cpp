// flashtier-gateway: OpenAI-compatible (and SGLang-shaped) HTTP/SSE front end for gpu-workers.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <thread>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

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
    app.model = ModelContext::load(app.opts.model_dir, app.opts.served_model_name);
  } catch (const std::exception& e) {
    std::cerr << "flashtier-gateway: " << e.what() << "\n";
    return 1;
  }
  if (!app.model->has_chat_template())
    std::cerr << "flashtier-gateway: warning: chat completions disabled: " << app.model->chat_template_error() << "\n";
  app.pool = std::make_unique<WorkerPool>(app.opts.workers, std::chrono::milliseconds(app.opts.health_interval_ms));
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
  signals.async_wait([&](const boost::system::error_code&, int) {
    server.stop();
    ioc.stop();
  });
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
