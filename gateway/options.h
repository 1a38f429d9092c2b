#pragma once
// Command-line flags of flashtier-gateway.
#include <cstddef>
#include <string>
#include <vector>

namespace ft::gateway {

struct GatewayOptions {
  std::string model_dir;                 // tokenizer.json, chat template, generation_config.json
  std::vector<std::string> workers;      // gpu-worker gRPC addresses (HOST:PORT)
  std::string host = "0.0.0.0";
  int port = 8000;                       // 0: pick a free port (printed on stdout)
  std::string api_key;                   // empty: no authentication
  std::string served_model_name;         // empty: the model folder's name
  size_t max_body_bytes = 16u << 20;     // larger request bodies get 413
  int max_queue = 256;                   // generation streams in flight before 429
  int max_n = 16;                        // largest accepted `n`
  int threads = 2;                       // HTTP I/O threads
  int keepalive_ms = 5000;               // SSE comment interval while no token arrives
  int health_interval_ms = 1000;         // worker Health/Stats polling
  int request_timeout_s = 60;            // reading one request (headers + body)
};

// Throws std::invalid_argument naming the flag on a bad or missing value.
GatewayOptions parse_options(int argc, const char* const* argv);
std::string usage_text();

}  // namespace ft::gateway
