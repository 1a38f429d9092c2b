#include "gateway/options.h"

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

namespace ft::gateway {
namespace {

long long parse_int(std::string_view flag, std::string_view v, long long lo, long long hi) {
  long long x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || x < lo || x > hi)
    throw std::invalid_argument(std::string(flag) + ": expected an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got '" + std::string(v) + "'");
  return x;
}

}  // namespace

std::string usage_text() {
  return "usage: flashtier-gateway --model-dir DIR --worker HOST:PORT [--worker HOST:PORT ...]\n"
         "                         [--port N] [--host ADDR] [--api-key KEY] [--served-model-name NAME]\n"
         "                         [--max-body-bytes N] [--max-queue N] [--max-n N] [--threads N]\n"
         "                         [--keepalive-ms N] [--health-interval-ms N] [--request-timeout-s N]\n"
         "                         [--api-key-file FILE] [--header-timeout-s N] [--max-connections N]\n"
         "                         [--request-deadline-s N] [--drain-timeout S] [--reuse-port]\n"
         "                         [--worker-dns HOST:PORT ...] [--dns-interval-ms N]\n"
         "                         [--worker-tls-ca FILE [--worker-tls-cert FILE --worker-tls-key FILE]\n"
         "                          [--worker-tls-name NAME]]\n"
         "  The API key may also come from $FLASHTIER_API_KEY (not visible in ps, unlike --api-key).\n";
}

GatewayOptions parse_options(int argc, const char* const* argv) {
  GatewayOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    std::string_view v;
    std::string flag(a);
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string_view::npos) {
      flag = std::string(a.substr(0, eq));
      v = a.substr(eq + 1);
    } else if (a == "--help" || a == "-h") {
      throw std::invalid_argument("help");
    } else if (a == "--reuse-port") {
      o.reuse_port = true;
      continue;
    } else {
      if (i + 1 >= argc) throw std::invalid_argument(flag + ": missing value");
      v = argv[++i];
    }
    if (flag == "--model-dir") o.model_dir = v;
    else if (flag == "--worker") o.workers.emplace_back(v);
    else if (flag == "--host") o.host = v;
    else if (flag == "--port") o.port = static_cast<int>(parse_int(flag, v, 0, 65535));
    else if (flag == "--api-key") o.api_key = v;
    else if (flag == "--served-model-name") o.served_model_name = v;
    else if (flag == "--max-body-bytes") o.max_body_bytes = static_cast<size_t>(parse_int(flag, v, 1024, 1ll << 34));
    else if (flag == "--max-queue") o.max_queue = static_cast<int>(parse_int(flag, v, 1, 1 << 20));
    else if (flag == "--max-n") o.max_n = static_cast<int>(parse_int(flag, v, 1, 1024));
    else if (flag == "--threads") o.threads = static_cast<int>(parse_int(flag, v, 1, 256));
    else if (flag == "--keepalive-ms") o.keepalive_ms = static_cast<int>(parse_int(flag, v, 10, 3600000));
    else if (flag == "--health-interval-ms") o.health_interval_ms = static_cast<int>(parse_int(flag, v, 10, 3600000));
    else if (flag == "--request-timeout-s") o.request_timeout_s = static_cast<int>(parse_int(flag, v, 1, 86400));
    else if (flag == "--api-key-file") o.api_key_file = v;
    else if (flag == "--header-timeout-s") o.header_timeout_s = static_cast<int>(parse_int(flag, v, 1, 86400));
    else if (flag == "--max-connections") o.max_connections = static_cast<int>(parse_int(flag, v, 1, 1 << 20));
    else if (flag == "--request-deadline-s") o.request_deadline_s = static_cast<int>(parse_int(flag, v, 0, 7 * 86400));
    else if (flag == "--drain-timeout") o.drain_timeout_s = static_cast<int>(parse_int(flag, v, 0, 86400));
    else if (flag == "--worker-dns") o.worker_dns.emplace_back(v);
    else if (flag == "--dns-interval-ms") o.dns_interval_ms = static_cast<int>(parse_int(flag, v, 100, 3600000));
    else if (flag == "--worker-tls-ca") o.worker_tls_ca = v;
    else if (flag == "--worker-tls-cert") o.worker_tls_cert = v;
    else if (flag == "--worker-tls-key") o.worker_tls_key = v;
    else if (flag == "--worker-tls-name") o.worker_tls_name = v;
    else throw std::invalid_argument("unknown flag " + flag);
  }
  if (o.model_dir.empty()) throw std::invalid_argument("--model-dir: required");
  if (o.workers.empty() && o.worker_dns.empty())
    throw std::invalid_argument("--worker: at least one gpu-worker address (or --worker-dns name) is required");
  for (const auto& w : o.workers)
    if (w.find(':') == std::string::npos) throw std::invalid_argument("--worker: expected HOST:PORT, got '" + w + "'");
  for (const auto& w : o.worker_dns)
    if (w.find(':') == std::string::npos) throw std::invalid_argument("--worker-dns: expected HOST:PORT, got '" + w + "'");
  if (o.worker_tls_cert.empty() != o.worker_tls_key.empty())
    throw std::invalid_argument("--worker-tls-cert and --worker-tls-key go together");
  if (!o.worker_tls_cert.empty() && o.worker_tls_ca.empty())
    throw std::invalid_argument("--worker-tls-cert: also give --worker-tls-ca (the CA that signed the workers' certificates)");
  return o;
}

std::string resolve_api_key(const GatewayOptions& o) {
  if (!o.api_key_file.empty()) {
    std::ifstream f(o.api_key_file);
    if (!f) throw std::invalid_argument("--api-key-file: cannot read " + o.api_key_file);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string key = ss.str();
    while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' ' || key.back() == '\t')) key.pop_back();
    if (key.find_first_of("\r\n") != std::string::npos)
      throw std::invalid_argument("--api-key-file: " + o.api_key_file + " holds more than one line");
    return key;
  }
  if (!o.api_key.empty()) return o.api_key;
  if (const char* e = std::getenv("FLASHTIER_API_KEY")) return e;
  return {};
}

}  // namespace ft::gateway
