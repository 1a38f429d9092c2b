// flashtier-prefix-bench --worker HOST:PORT [--turns 20] [--system N] [--user N] [--tool N] [--answer N]
//                        [--seed S] [--label TEXT]
// Replays an agent-style conversation against a gpu-worker's Generation API: every turn sends the
// whole history (system prompt, then per earlier turn the user message, the model's own answer
// and a tool result) plus a new user message, and streams a greedy answer. Prints per turn the
// prompt length, the prompt tokens the worker served from its prefix cache (usage.cached_tokens),
// the time to the first token and the whole turn; then the totals. Run it once against a worker
// with the prefix cache on and once with --prefix-cache-gb 0 to compare.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "proto/flashtier/generate.grpc.pb.h"

namespace pb = flashtier::v1;

namespace {

std::vector<int32_t> random_ids(std::mt19937_64& g, int n, uint32_t vocab) {
  // Ids 1 … vocab−1 minus the top 64 (special tokens sit there in GLM vocabularies).
  std::uniform_int_distribution<int32_t> d(1, static_cast<int32_t>(vocab > 128 ? vocab - 65 : vocab - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& t : v) t = d(g);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string worker, label = "run";
  int turns = 20, system = 600, user = 120, tool = 250, answer = 40;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--worker") worker = v;
    else if (a == "--turns") turns = std::stoi(v);
    else if (a == "--system") system = std::stoi(v);
    else if (a == "--user") user = std::stoi(v);
    else if (a == "--tool") tool = std::stoi(v);
    else if (a == "--answer") answer = std::stoi(v);
    else if (a == "--seed") seed = std::stoull(v);
    else if (a == "--label") label = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (worker.empty()) {
    std::fprintf(stderr, "usage: flashtier-prefix-bench --worker HOST:PORT [--turns N] [--system N] [--user N] "
                         "[--tool N] [--answer N] [--seed S] [--label TEXT]\n");
    return 2;
  }
  auto stub = pb::Generation::NewStub(grpc::CreateChannel(worker, grpc::InsecureChannelCredentials()));
  pb::ModelInfoResponse info;
  {
    grpc::ClientContext ctx;
    const grpc::Status st = stub->ModelInfo(&ctx, pb::ModelInfoRequest{}, &info);
    if (!st.ok()) {
      std::fprintf(stderr, "ModelInfo: %s\n", st.error_message().c_str());
      return 1;
    }
  }
  std::mt19937_64 g(seed);
  std::vector<int32_t> history = random_ids(g, system, info.vocab_size());
  using clock = std::chrono::steady_clock;
  std::printf("### %s\n\n| turn | prompt tokens | cached | TTFT ms | turn ms |\n|---|---|---|---|---|\n", label.c_str());
  uint64_t total_prompt = 0, total_cached = 0, prefilled_after_1 = 0, prompt_after_1 = 0;
  double first_ttft = 0, last_ttft = 0;
  for (int t = 0; t < turns; ++t) {
    const auto msg = random_ids(g, user, info.vocab_size());
    history.insert(history.end(), msg.begin(), msg.end());
    if (static_cast<int64_t>(history.size()) + answer >= info.context_length()) {
      std::printf("(stopped: turn %d would exceed the worker's context of %u tokens)\n", t + 1, info.context_length());
      break;
    }
    pb::GenerateRequest req;
    for (int32_t id : history) req.add_prompt_token_ids(id);
    req.set_max_new_tokens(static_cast<uint32_t>(answer));
    req.set_ignore_eos(true);
    req.mutable_sampling()->set_temperature(0);
    grpc::ClientContext ctx;
    const auto t0 = clock::now();
    auto reader = stub->Generate(&ctx, req);
    pb::GenerateResponse resp;
    double ttft = -1;
    std::vector<int32_t> out;
    uint32_t cached = 0;
    while (reader->Read(&resp)) {
      if (ttft < 0 && resp.tokens_size() > 0)
        ttft = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
      for (const auto& tok : resp.tokens()) out.push_back(tok.token_id());
      if (resp.finished()) cached = resp.usage().cached_tokens();
    }
    const grpc::Status st = reader->Finish();
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    if (!st.ok()) {
      std::fprintf(stderr, "turn %d: %s\n", t + 1, st.error_message().c_str());
      return 1;
    }
    std::printf("| %d | %zu | %u | %.1f | %.1f |\n", t + 1, history.size(), cached, ttft, ms);
    total_prompt += history.size();
    total_cached += cached;
    if (t == 0) first_ttft = ttft;
    else {
      prompt_after_1 += history.size();
      prefilled_after_1 += history.size() - cached;
    }
    last_ttft = ttft;
    // The next turn quotes this answer and a tool result.
    history.insert(history.end(), out.begin(), out.end());
    const auto tool_result = random_ids(g, tool, info.vocab_size());
    history.insert(history.end(), tool_result.begin(), tool_result.end());
  }
  std::printf("\n%s: prompt tokens %llu, served from cache %llu (%.1f%% of turns 2+), prefilled %llu; "
              "TTFT turn 1 %.1f ms, last turn %.1f ms\n",
              label.c_str(), static_cast<unsigned long long>(total_prompt),
              static_cast<unsigned long long>(total_cached),
              prompt_after_1 ? 100.0 * (prompt_after_1 - prefilled_after_1) / prompt_after_1 : 0.0,
              static_cast<unsigned long long>(total_prompt - total_cached), first_ttft, last_ttft);
  return 0;
}
