// The ExpertTier gRPC service in-process: Info before and after loading, Compute answers equal to
// the engine's, and malformed requests answered with an error on a stream that keeps working.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <climits>
#include <cstring>

#include "cpu-expert-worker/expert_engine.h"
#include "cpu-expert-worker/fingerprint.h"
#include "cpu-expert-worker/grpc_service.h"
#include "cpu-expert-worker/segment_builder.h"
#include "shared/ipc/liveness.h"
#include "shared/model/config.h"
#include "tests/cpu-expert-worker/test_models.h"
#include "tests/ipc/child_process.h"

using namespace ft;
using namespace ft::cew;
namespace pb = flashtier::experts::v1;

namespace {

class GrpcTier : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = test::tiny_chat();
    cfg = load_config(dir);
    name = test::unique_name("grpc");
    SegmentOptions o;
    o.name = name;
    seg = open_or_build_segment(dir, cfg, model_fingerprint(dir), o);
    engine = std::make_unique<SegmentExperts>(seg.segment, static_cast<float>(cfg.swiglu_limit), 1);
    st.info = engine->info();
    st.ring_name = "some-ring";
    st.host_id = ipc::host_boot_id();
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.SetMaxReceiveMessageSize(INT_MAX);
    b.RegisterService(&service);
    server = b.BuildAndStart();
    ASSERT_GT(port, 0);
    stub = pb::ExpertTier::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                       grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server->Shutdown();
    ipc::ShmMapping::remove(name);
  }

  pb::ExpertRequest request(uint64_t id, uint32_t layer, uint32_t n) {
    pb::ExpertRequest r;
    r.set_id(id);
    r.set_layer(layer);
    r.set_n_tokens(n);
    r.set_slots(4);
    std::vector<float> x(size_t{n} * 64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 19) / 19.0f - 0.5f;
    r.set_hidden(std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
    for (uint32_t t = 0; t < n; ++t)
      for (int k = 0; k < 4; ++k) {
        r.add_expert_ids((t + 3 * k) % 16);
        r.add_weights(0.25f * (k + 1));
      }
    return r;
  }

  ModelConfig cfg;
  std::string name;
  OpenedSegment seg;
  std::unique_ptr<SegmentExperts> engine;
  WorkerState st;
  ExpertTierService service{st};
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<pb::ExpertTier::Stub> stub;
};

}  // namespace

TEST_F(GrpcTier, InfoDescribesTheTier) {
  grpc::ClientContext ctx;
  pb::InfoResponse info;
  ASSERT_TRUE(stub->Info(&ctx, {}, &info).ok());
  EXPECT_FALSE(info.ready());
  EXPECT_EQ(info.ring_name(), "") << "no ring before the experts are ready";
  st.engine = engine.get();
  grpc::ClientContext ctx2;
  ASSERT_TRUE(stub->Info(&ctx2, {}, &info).ok());
  EXPECT_TRUE(info.ready());
  EXPECT_EQ(info.hidden_size(), 64u);
  EXPECT_EQ(info.n_experts(), 16u);
  EXPECT_EQ(info.top_k(), 4u);
  EXPECT_EQ(info.moe_layers_size(), 5);
  EXPECT_EQ(info.moe_layers(0), 3u);
  EXPECT_EQ(info.model_fingerprint(), model_fingerprint(test::tiny_chat()));
  EXPECT_EQ(info.shm_segment(), name);
  EXPECT_EQ(info.ring_name(), "some-ring");
  EXPECT_EQ(info.host_id(), ipc::host_boot_id());
}

TEST_F(GrpcTier, ComputeStreamAnswersAndSurvivesBadRequests) {
  grpc::ClientContext ctx;
  auto stream = stub->Compute(&ctx);
  pb::ExpertResponse resp;
  // Not loaded yet.
  ASSERT_TRUE(stream->Write(request(1, 3, 2)));
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_NE(resp.error().find("still loading"), std::string::npos) << resp.error();
  st.engine = engine.get();

  std::vector<pb::ExpertRequest> bad;
  bad.push_back(request(2, 0, 2));  // dense layer
  bad.push_back(request(3, 42, 2));
  auto r = request(4, 3, 2);
  r.set_expert_ids(1, 99);
  bad.push_back(r);
  r = request(5, 3, 2);
  r.mutable_hidden()->resize(12);
  bad.push_back(r);
  r = request(6, 3, 2);
  r.add_weights(1.0f);
  bad.push_back(r);
  r = request(7, 3, 2);
  r.set_n_tokens(1000000);
  bad.push_back(r);
  for (const auto& q : bad) {
    ASSERT_TRUE(stream->Write(q));
    ASSERT_TRUE(stream->Read(&resp));
    EXPECT_EQ(resp.id(), q.id());
    EXPECT_FALSE(resp.error().empty()) << "request " << q.id() << " accepted";
    EXPECT_TRUE(resp.out().empty());
  }
  const auto good = request(8, 5, 3);
  ASSERT_TRUE(stream->Write(good));
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.id(), 8u);
  ASSERT_EQ(resp.error(), "");
  ASSERT_EQ(resp.out().size(), 3u * 64 * 4);
  ipc::ExpertBatch b{5, 3, 4, 64, reinterpret_cast<const float*>(good.hidden().data()), good.expert_ids().data(),
                     good.weights().data()};
  std::vector<float> want(3 * 64);
  engine->compute(b, want.data());
  EXPECT_EQ(std::memcmp(resp.out().data(), want.data(), want.size() * 4), 0);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}
