// flashtier-grpc-generate --worker HOST:PORT --prompt-ids 1,2,3 [--max-new-tokens N] [--temperature T]
//                        [--top-p P] [--top-k K] [--seed S] [--logprobs N] [--ignore-eos]
//                        [--json-schema JSON | --regex RE | --ebnf GRAMMAR] [--min-tokens N]
// Streams tokens from a gpu-worker's public Generation API, one line per token as it arrives:
// an example client of proto/flashtier/generate.proto.
#include <grpcpp/grpcpp.h>

#include <iostream>
#include <sstream>
#include <string>

#include "proto/flashtier/generate.grpc.pb.h"

namespace pb = flashtier::v1;

int main(int argc, char** argv) {
  std::string worker, ids;
  pb::GenerateRequest req;
  req.set_max_new_tokens(32);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ignore-eos") {
      req.set_ignore_eos(true);
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "missing value for " << a << "\n";
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--worker") worker = v;
    else if (a == "--prompt-ids") ids = v;
    else if (a == "--max-new-tokens") req.set_max_new_tokens(static_cast<uint32_t>(std::stoul(v)));
    else if (a == "--temperature") req.mutable_sampling()->set_temperature(std::stof(v));
    else if (a == "--top-p") req.mutable_sampling()->set_top_p(std::stof(v));
    else if (a == "--top-k") req.mutable_sampling()->set_top_k(std::stoi(v));
    else if (a == "--seed") req.mutable_sampling()->set_seed(std::stoull(v));
    else if (a == "--json-schema") req.mutable_constraint()->set_json_schema(v);
    else if (a == "--regex") req.mutable_constraint()->set_regex(v);
    else if (a == "--ebnf") req.mutable_constraint()->set_ebnf(v);
    else if (a == "--min-tokens") req.set_min_tokens(static_cast<uint32_t>(std::stoul(v)));
    else if (a == "--logprobs") {
      req.set_logprobs(true);
      req.set_top_logprobs(static_cast<uint32_t>(std::stoul(v)));
    } else {
      std::cerr << "unknown argument " << a << "\n";
      return 2;
    }
  }
  if (worker.empty() || ids.empty()) {
    std::cerr << "usage: flashtier-grpc-generate --worker HOST:PORT --prompt-ids 1,2,3 [--max-new-tokens N]\n"
                 "         [--temperature T] [--top-p P] [--top-k K] [--seed S] [--logprobs N] [--ignore-eos]\n"
                 "         [--json-schema JSON | --regex RE | --ebnf GRAMMAR] [--min-tokens N]\n";
    return 2;
  }
  std::stringstream ss(ids);
  for (std::string t; std::getline(ss, t, ',');) req.add_prompt_token_ids(std::stoi(t));
  auto stub = pb::Generation::NewStub(grpc::CreateChannel(worker, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, req);
  pb::GenerateResponse r;
  while (reader->Read(&r)) {
    for (const auto& t : r.tokens()) {
      std::cout << t.token_id();
      if (req.logprobs()) std::cout << " logprob=" << t.logprob();
      std::cout << "\n" << std::flush;
    }
    if (r.finished())
      std::cout << "finished: " << pb::FinishReason_Name(r.finish_reason()) << " prompt_tokens=" << r.usage().prompt_tokens()
                << " completion_tokens=" << r.usage().completion_tokens() << "\n";
  }
  const grpc::Status s = reader->Finish();
  if (!s.ok()) {
    std::cerr << "error: " << s.error_code() << " " << s.error_message() << "\n";
    return 1;
  }
  return 0;
}
