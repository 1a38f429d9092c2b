#pragma once
// A WorkerCore + GenerationService on the tiny-chat fixture behind a real gRPC server on a free
// loopback port, shared by the tests of one suite.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <thread>

#include "gpu-worker/service/generation_service.h"
#include "tests/support/test_paths.h"

namespace ft::worker::testing {

class WorkerServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    WorkerOptions o;
    o.model_dir = test::fixture("glm5-tiny-chat/model");
    o.scheduler.max_batch_size = 4;
    core_ = new WorkerCore(o);
    service_ = new GenerationService(*core_);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(service_);
    server_ = b.BuildAndStart().release();
    for (int i = 0; i < 500 && core_->state() == WorkerCore::State::Loading; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(core_->state(), WorkerCore::State::Ready) << core_->load_error();
  }
  static void TearDownTestSuite() {
    server_->Shutdown();
    delete server_;
    delete service_;
    delete core_;
  }
  static std::unique_ptr<flashtier::v1::Generation::Stub> stub() {
    return flashtier::v1::Generation::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  }
  static inline WorkerCore* core_ = nullptr;
  static inline GenerationService* service_ = nullptr;
  static inline grpc::Server* server_ = nullptr;
  static inline int port_ = 0;
};

}  // namespace ft::worker::testing
