// The real flashtier-gpu-worker binary (CPU backend, tiny fixture model, experts in process) on
// SIGTERM: Health says NOT_SERVING "draining", a new Generate gets UNAVAILABLE, the generation
// that was running finishes with every token, then the process exits 0.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "proto/flashtier/generate.grpc.pb.h"
#include "tests/gateway/harness.h"
#include "tests/support/test_paths.h"

namespace ft::test {
namespace {

namespace pb = flashtier::v1;
using Clock = std::chrono::steady_clock;

pb::GenerateRequest long_request(uint32_t n) {
  pb::GenerateRequest req;
  for (int32_t t : {3007, 100, 200, 300}) req.add_prompt_token_ids(t);
  req.mutable_sampling()->set_temperature(0);
  req.set_max_new_tokens(n);
  req.set_ignore_eos(true);
  return req;
}

pb::HealthResponse health(pb::Generation::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  pb::HealthResponse r;
  if (!stub.Health(&ctx, {}, &r).ok()) r.set_detail("unreachable");
  return r;
}

TEST(WorkerDrain, SigtermFinishesTheRunningGenerationAndRefusesNewOnes) {
  const int port = free_port();
  ChildProcess worker({bin_path("flashtier-gpu-worker"), "--model", fixture("glm5-tiny-chat/model"), "--listen",
                       "127.0.0.1:" + std::to_string(port), "--experts", "local", "--backend", "cpu", "--context-size", "8192",
                       "--drain-timeout", "30"});
  ASSERT_TRUE(worker.wait_for_output("listening on port", 30000)) << worker.output();
  auto stub = pb::Generation::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 500 && health(*stub).status() != pb::HealthResponse::SERVING; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(health(*stub).status(), pb::HealthResponse::SERVING) << worker.output();

  // Long enough to be running when the signal lands, short enough for the suite.
  constexpr uint32_t kTokens = 6000;  // ~2-3 s on the CPU backend
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, long_request(kTokens));
  pb::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  size_t tokens = static_cast<size_t>(msg.tokens_size());

  ASSERT_EQ(::kill(worker.pid(), SIGTERM), 0);
  ASSERT_TRUE(worker.wait_for_output("gpu-worker: draining", 5000)) << worker.output();
  const pb::HealthResponse h = health(*stub);
  EXPECT_EQ(h.status(), pb::HealthResponse::NOT_SERVING);
  EXPECT_EQ(h.detail(), "draining");
  {
    grpc::ClientContext c2;
    auto r2 = stub->Generate(&c2, long_request(4));
    pb::GenerateResponse m2;
    EXPECT_FALSE(r2->Read(&m2));
    const grpc::Status s2 = r2->Finish();
    EXPECT_EQ(s2.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(s2.error_message().find("draining"), std::string::npos) << s2.error_message();
  }

  bool finished = false;
  pb::FinishReason reason = pb::FINISH_REASON_UNSPECIFIED;
  while (reader->Read(&msg)) {
    tokens += static_cast<size_t>(msg.tokens_size());
    if (msg.finished()) {
      finished = true;
      reason = msg.finish_reason();
    }
  }
  const grpc::Status s = reader->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(finished);
  EXPECT_EQ(reason, pb::FINISH_REASON_LENGTH);
  EXPECT_EQ(tokens, kTokens);

  const int st = worker.wait_exit(10000);
  ASSERT_GE(st, 0) << "the gpu-worker did not exit after its last generation:\n" << worker.output();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << worker.output();
  EXPECT_NE(worker.output().find("drained (0 still running)"), std::string::npos) << worker.output();
}

}  // namespace
}  // namespace ft::test
