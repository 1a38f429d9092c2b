#include "gateway/options.h"

#include <charconv>
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
         "                         [--keepalive-ms N] [--health-interval-ms N] [--request-timeout-s N]\n";
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
    else throw std::invalid_argument("unknown flag " + flag);
  }
  if (o.model_dir.empty()) throw std::invalid_argument("--model-dir: required");
  if (o.workers.empty()) throw std::invalid_argument("--worker: at least one gpu-worker address is required");
  for (const auto& w : o.workers)
    if (w.find(':') == std::string::npos) throw std::invalid_argument("--worker: expected HOST:PORT, got '" + w + "'");
  return o;
}

}  // namespace ft::gateway
