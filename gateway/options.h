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
  int request_timeout_s = 60;            // reading one request's body once its headers are in
  // Deploy limits (gateway/README.md "Limits and draining"):
  std::string api_key_file;              // key read from a file (a secret); see resolve_api_key
  int header_timeout_s = 15;             // waiting for a request's headers (slow or idle clients)
  int max_connections = 1024;            // open HTTP connections; more are answered 503 and closed
  int request_deadline_s = 1800;         // one generation end to end (0: none); then an error
  int drain_timeout_s = 30;              // SIGTERM: in-flight requests get this long, then exit 0
  bool reuse_port = false;               // SO_REUSEPORT: several gateways share one port
  std::vector<std::string> worker_dns;   // HOST:PORT whose every address is a gpu-worker
  int dns_interval_ms = 2000;            // re-resolution of --worker-dns names
  std::string worker_tls_ca;             // TLS to the gpu-workers: CA bundle (PEM); empty: plaintext
  std::string worker_tls_cert, worker_tls_key;  // client certificate for mutual TLS (optional)
  std::string worker_tls_name;           // server name to verify (default: the address's host)
};

// The API key: --api-key-file (trailing whitespace trimmed; an empty file means no key), else
// --api-key, else $FLASHTIER_API_KEY, else none. Throws std::invalid_argument when the file cannot
// be read. A key in a file or the environment is not visible in `ps`, unlike the flag.
std::string resolve_api_key(const GatewayOptions& o);

// Throws std::invalid_argument naming the flag on a bad or missing value.
GatewayOptions parse_options(int argc, const char* const* argv);
std::string usage_text();

}  // namespace ft::gateway
