// flashtier-probe: the health check of the container images and Kubernetes probes, so the slim
// runtime images need no curl or grpc_health_probe.
//   flashtier-probe http [HOST:PORT] [PATH]   exit 0 when GET PATH answers 200 (default /health)
//   flashtier-probe generation [HOST:PORT]    exit 0 when the gpu-worker's Health says SERVING
//   flashtier-probe experts [HOST:PORT]       exit 0 when the cpu-expert-worker's Info says ready
// The address defaults to $FLASHTIER_PROBE_ADDR, else the service's default port on 127.0.0.1.
// Prints one line saying what it saw; exit 1 = unhealthy, 2 = bad usage. Timeout 3 s
// ($FLASHTIER_PROBE_TIMEOUT_MS).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "deploy/local/http_probe.h"
#include "proto/flashtier/experts.grpc.pb.h"
#include "proto/flashtier/generate.grpc.pb.h"

namespace {

int usage() {
  std::fputs("usage: flashtier-probe http|generation|experts [HOST:PORT] [PATH]\n", stderr);
  return 2;
}

std::chrono::milliseconds timeout() {
  const char* t = std::getenv("FLASHTIER_PROBE_TIMEOUT_MS");
  const long ms = t ? std::strtol(t, nullptr, 10) : 0;
  return std::chrono::milliseconds(ms > 0 ? ms : 3000);
}

std::shared_ptr<grpc::Channel> channel(const std::string& addr) {
  return grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
}

int probe_http(const std::string& addr, const std::string& path) {
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos) return usage();
  const int port = std::atoi(addr.c_str() + colon + 1);
  const int status = ft::local::http_get_status(addr.substr(0, colon), port, path, timeout());
  std::printf("http %s%s: %d\n", addr.c_str(), path.c_str(), status);
  return status == 200 ? 0 : 1;
}

int probe_generation(const std::string& addr) {
  auto stub = flashtier::v1::Generation::NewStub(channel(addr));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout());
  flashtier::v1::HealthResponse r;
  const grpc::Status s = stub->Health(&ctx, flashtier::v1::HealthRequest(), &r);
  if (!s.ok()) {
    std::printf("gpu-worker %s: unreachable: %s\n", addr.c_str(), s.error_message().c_str());
    return 1;
  }
  const bool ok = r.status() == flashtier::v1::HealthResponse::SERVING;
  std::printf("gpu-worker %s: %s %s\n", addr.c_str(), flashtier::v1::HealthResponse::Status_Name(r.status()).c_str(),
              r.detail().c_str());
  return ok ? 0 : 1;
}

int probe_experts(const std::string& addr) {
  auto stub = flashtier::experts::v1::ExpertTier::NewStub(channel(addr));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout());
  flashtier::experts::v1::InfoResponse r;
  const grpc::Status s = stub->Info(&ctx, flashtier::experts::v1::InfoRequest(), &r);
  if (!s.ok()) {
    std::printf("cpu-expert-worker %s: unreachable: %s\n", addr.c_str(), s.error_message().c_str());
    return 1;
  }
  std::printf("cpu-expert-worker %s: %s (%llu bytes loaded)\n", addr.c_str(), r.ready() ? "ready" : "loading",
              static_cast<unsigned long long>(r.bytes_loaded()));
  return r.ready() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string kind = argv[1];
  const char* env = std::getenv("FLASHTIER_PROBE_ADDR");
  auto addr_or = [&](const char* dflt) { return argc > 2 ? std::string(argv[2]) : env && *env ? std::string(env) : std::string(dflt); };
  if (kind == "http") return probe_http(addr_or("127.0.0.1:8000"), argc > 3 ? argv[3] : "/health");
  if (kind == "generation") return probe_generation(addr_or("127.0.0.1:50051"));
  if (kind == "experts") return probe_experts(addr_or("127.0.0.1:50071"));
  return usage();
}
