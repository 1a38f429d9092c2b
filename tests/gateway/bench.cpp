// flashtier-gateway-bench: what the gateway adds per token. A fake gpu-worker streams scripted
// tokens as fast as it can (one gRPC message per token); the same streams are read once directly
// over gRPC and once through flashtier-gateway as SSE (completions, and chat with the GLM parser),
// single and 8 concurrent. Overhead per token = gateway time per token - direct time per token.
//   flashtier-gateway-bench [--tokens N] [--repeats R]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <future>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "proto/flashtier/generate.grpc.pb.h"
#include "tests/gateway/fake_worker.h"
#include "tests/gateway/harness.h"

using namespace ft::test;
using Clock = std::chrono::steady_clock;

namespace {

double direct_grpc(const std::string& addr, int tokens) {
  auto stub = flashtier::v1::Generation::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  flashtier::v1::GenerateRequest req;
  for (int id : {3002, 3004, 40, 41}) req.add_prompt_token_ids(id);
  req.set_max_new_tokens(tokens);
  req.set_ignore_eos(true);
  grpc::ClientContext ctx;
  auto t0 = Clock::now();
  auto reader = stub->Generate(&ctx, req);
  flashtier::v1::GenerateResponse msg;
  int got = 0;
  while (reader->Read(&msg)) got += msg.tokens_size();
  reader->Finish();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (got != tokens) std::fprintf(stderr, "direct: got %d tokens, wanted %d\n", got, tokens);
  return s;
}

// Streams one request through the gateway; returns seconds until [DONE].
double via_gateway(int port, const std::string& path, const std::string& body, int* events) {
  auto t0 = Clock::now();
  SseStream st(port, path, body);
  if (st.status(30000) != 200) {
    std::fprintf(stderr, "gateway answered %d\n", st.status());
    std::exit(1);
  }
  std::string ev;
  int n = 0;
  while (st.next(ev, 30000)) {
    ++n;
    if (ev == "data: [DONE]") break;
  }
  if (events) *events = n;
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds (user + system) used so far by a process.
double cpu_seconds(pid_t pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return 0;
  char buf[2048];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // fields after the command name
  unsigned long long ut = 0, st = 0;
  std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st);
  return double(ut + st) / double(sysconf(_SC_CLK_TCK));
}

}  // namespace

int main(int argc, char** argv) {
  int tokens = 20000, repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--tokens") tokens = std::atoi(argv[i + 1]);
    else if (a == "--repeats") repeats = std::atoi(argv[i + 1]);
  }
  FakeWorker w;
  FakeScript s;
  for (int i = 0; i < tokens; ++i) s.tokens.push_back(256 + (i * 7919) % 2700);  // ordinary vocabulary ids
  w.set_script(s);
  w.set_context_length(1u << 30);
  GatewayProcess gw({"--model-dir", std::string(FLASHTIER_SOURCE_DIR) + "/tests/fixtures/glm5-tiny-chat/model", "--worker", w.address(),
                     "--port", "0", "--host", "127.0.0.1", "--health-interval-ms", "100"});
  if (!gw.wait_healthy()) return 1;

  // Best wall time of the repeats; *cpu gets the gateway's CPU seconds per run (average).
  auto best = [&](auto f, double* cpu = nullptr) {
    double b = 1e9;
    double c0 = cpu_seconds(gw.pid());
    for (int r = 0; r < repeats; ++r) b = std::min(b, f());
    if (cpu) *cpu = (cpu_seconds(gw.pid()) - c0) / repeats;
    return b;
  };
  const std::string n = std::to_string(tokens);
  const std::string completion = "{\"prompt\":[3002,3004,40,41],\"max_tokens\":" + n + ",\"ignore_eos\":true,\"stream\":true}";
  const std::string chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":" + n + ",\"ignore_eos\":true,\"stream\":true}";
  const std::string chat_plain = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":" + n + ",\"ignore_eos\":true}";

  double direct = best([&] { return direct_grpc(w.address(), tokens); });
  int events = 0;
  double cpu_comp = 0, cpu_chat = 0, cpu_plain = 0, cpu8 = 0;
  double comp = best([&] { return via_gateway(gw.port(), "/v1/completions", completion, &events); }, &cpu_comp);
  double ch = best([&] { return via_gateway(gw.port(), "/v1/chat/completions", chat, nullptr); }, &cpu_chat);
  double plain = best(
      [&] {
        auto t0 = Clock::now();
        HttpResult r = http_request(gw.port(), "POST", "/v1/chat/completions", chat_plain, {}, 600000);
        if (r.status != 200) std::exit(1);
        return std::chrono::duration<double>(Clock::now() - t0).count();
      },
      &cpu_plain);
  auto concurrent = [&](bool through_gateway, double* cpu) {
    return best([&] {
      auto t0 = Clock::now();
      std::vector<std::future<void>> fs;
      for (int k = 0; k < 8; ++k)
        fs.push_back(std::async(std::launch::async, [&] {
          if (through_gateway) via_gateway(gw.port(), "/v1/completions", completion, nullptr);
          else direct_grpc(w.address(), tokens);
        }));
      for (auto& f : fs) f.get();
      return std::chrono::duration<double>(Clock::now() - t0).count();
    }, cpu);
  };
  double direct8 = concurrent(false, nullptr), gw8 = concurrent(true, &cpu8);

  auto us = [&](double sec, int streams = 1) { return sec * 1e6 / (double(tokens) * streams); };
  std::printf("tokens per stream: %d (one gRPC message each), best of %d; gateway CPU = its user+system time per token\n", tokens,
              repeats);
  std::printf("| path | wall us/token | tokens/s | wall overhead us/token | gateway CPU us/token |\n|---|---|---|---|---|\n");
  std::printf("| direct gRPC, 1 stream | %.2f | %.0f | - | - |\n", us(direct), tokens / direct);
  std::printf("| gateway /v1/completions SSE, 1 stream | %.2f | %.0f | %.2f | %.2f |\n", us(comp), tokens / comp, us(comp) - us(direct),
              us(cpu_comp));
  std::printf("| gateway /v1/chat/completions SSE (GLM parser), 1 stream | %.2f | %.0f | %.2f | %.2f |\n", us(ch), tokens / ch,
              us(ch) - us(direct), us(cpu_chat));
  std::printf("| gateway /v1/chat/completions non-streaming | %.2f | %.0f | %.2f | %.2f |\n", us(plain), tokens / plain,
              us(plain) - us(direct), us(cpu_plain));
  std::printf("| direct gRPC, 8 streams | %.2f | %.0f | - | - |\n", us(direct8, 8), 8 * tokens / direct8);
  std::printf("| gateway /v1/completions SSE, 8 streams | %.2f | %.0f | %.2f | %.2f |\n", us(gw8, 8), 8 * tokens / gw8,
              us(gw8, 8) - us(direct8, 8), us(cpu8, 8));
  std::printf("(SSE events in one completion stream: %d)\n", events);
  return 0;
}
