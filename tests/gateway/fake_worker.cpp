#include "tests/gateway/fake_worker.h"

#include <algorithm>
#include <set>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "proto/flashtier/generate.grpc.pb.h"

namespace ft::test {

namespace v1 = flashtier::v1;

struct FakeWorker::Impl final : public v1::Generation::Service {
  FakeWorker* owner = nullptr;
  std::string model_name;
  std::string host = "127.0.0.1";
  mutable std::mutex mu;
  std::function<FakeScript(const v1::GenerateRequest&)> script;
  int health = v1::HealthResponse::SERVING;
  uint32_t context_length = 4096;
  std::vector<int32_t> eos{3000, 3007, 3009};
  uint32_t cached = 0;
  std::vector<v1::GenerateRequest> requests;
  std::vector<Clock::time_point> cancel_times;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  // Sleeps in small slices; false when the call was cancelled meanwhile.
  bool wait(grpc::ServerContext* ctx, std::chrono::microseconds d) {
    auto until = Clock::now() + d;
    while (Clock::now() < until) {
      if (ctx->IsCancelled()) return false;
      std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::microseconds(500), until - Clock::now()));
    }
    return !ctx->IsCancelled();
  }

  void note_cancel() {
    owner->cancelled_.fetch_add(1);
    std::lock_guard lk(mu);
    cancel_times.push_back(Clock::now());
  }

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* w) override {
    owner->calls_.fetch_add(1);
    FakeScript s;
    std::set<int32_t> stops(req->stop_token_ids().begin(), req->stop_token_ids().end());
    uint32_t cached_now;
    {
      std::lock_guard lk(mu);
      requests.push_back(*req);
      if (script) s = script(*req);
      if (!req->ignore_eos()) stops.insert(eos.begin(), eos.end());
      cached_now = cached;
    }
    if (req->prompt_token_ids_size() == 0) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty prompt");
    if (s.grpc_error && s.error_after == 0)
      return grpc::Status(static_cast<grpc::StatusCode>(s.grpc_error), "scripted failure");
    owner->active_.fetch_add(1);
    struct Dec {
      std::atomic<int>& a;
      ~Dec() { a.fetch_sub(1); }
    } dec{owner->active_};
    if (!wait(ctx, s.first_delay)) {
      note_cancel();
      return grpc::Status::CANCELLED;
    }
    const uint32_t limit = req->max_new_tokens();
    uint32_t produced = 0;
    size_t i = 0;
    bool done = false;
    while (!done) {
      v1::GenerateResponse msg;
      for (int k = 0; k < std::max(1, s.tokens_per_message) && i < s.tokens.size(); ++k, ++i) {
        int32_t id = s.tokens[i];
        auto* t = msg.add_tokens();
        t->set_token_id(id);
        if (req->logprobs()) {
          t->set_logprob(-0.125f * float(produced + 1));
          for (uint32_t a = 0; a < req->top_logprobs(); ++a) {
            auto* tl = t->add_top_logprobs();
            tl->set_token_id(a == 0 ? id : int32_t((id + a) % 3000));
            tl->set_logprob(-0.125f * float(produced + 1) - float(a));
          }
        }
        ++produced;
        if (s.grpc_error && produced >= uint32_t(s.error_after)) break;
        if (stops.count(id)) {
          msg.set_finished(true);
          msg.set_finish_reason(v1::FINISH_REASON_STOP);
          msg.set_stop_token_id(id);
          done = true;
          break;
        }
        if (limit && produced >= limit) {
          msg.set_finished(true);
          msg.set_finish_reason(v1::FINISH_REASON_LENGTH);
          done = true;
          break;
        }
      }
      if (s.grpc_error && produced >= uint32_t(s.error_after)) {
        if (msg.tokens_size()) w->Write(msg);
        return grpc::Status(static_cast<grpc::StatusCode>(s.grpc_error), "scripted failure mid-stream");
      }
      if (!done && i >= s.tokens.size()) {
        if (s.finish_without_reason) {
          if (msg.tokens_size()) w->Write(msg);
          return grpc::Status::OK;
        }
        msg.set_finished(true);
        msg.set_finish_reason(v1::FINISH_REASON_STOP);
        done = true;
      }
      if (done) {
        auto* u = msg.mutable_usage();
        u->set_prompt_tokens(req->prompt_token_ids_size());
        u->set_completion_tokens(produced);
        u->set_cached_tokens(cached_now);
      }
      if (!w->Write(msg) || ctx->IsCancelled()) {
        note_cancel();
        return grpc::Status::CANCELLED;
      }
      if (!done && !wait(ctx, s.delay)) {
        note_cancel();
        return grpc::Status::CANCELLED;
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status ModelInfo(grpc::ServerContext*, const v1::ModelInfoRequest*, v1::ModelInfoResponse* r) override {
    std::lock_guard lk(mu);
    r->set_model_name(model_name);
    r->set_model_type("glm5_next");
    r->set_vocab_size(3029);
    r->set_context_length(context_length);
    for (int32_t e : eos) r->add_eos_token_ids(e);
    r->set_max_batch_size(8);
    return grpc::Status::OK;
  }

  grpc::Status Health(grpc::ServerContext*, const v1::HealthRequest*, v1::HealthResponse* r) override {
    std::lock_guard lk(mu);
    r->set_status(static_cast<v1::HealthResponse::Status>(health));
    r->set_detail(health == v1::HealthResponse::SERVING ? "ok" : "scripted state");
    return grpc::Status::OK;
  }

  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*, v1::StatsResponse* r) override {
    r->set_running(owner->active_.load());
    r->set_cancelled(owner->cancelled_.load());
    return grpc::Status::OK;
  }
};

FakeWorker::FakeWorker(std::string model_name, std::string host, int port) : impl_(std::make_unique<Impl>()) {
  impl_->owner = this;
  impl_->model_name = std::move(model_name);
  impl_->host = std::move(host);
  grpc::ServerBuilder b;
  b.AddListeningPort(impl_->host + ":" + std::to_string(port), grpc::InsecureServerCredentials(), &impl_->port);
  b.RegisterService(impl_.get());
  impl_->server = b.BuildAndStart();
}

FakeWorker::~FakeWorker() { shutdown(); }

void FakeWorker::shutdown() {
  if (impl_->server) {
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    impl_->server->Wait();
    impl_->server.reset();
  }
}

std::string FakeWorker::address() const { return impl_->host + ":" + std::to_string(impl_->port); }
int FakeWorker::port() const { return impl_->port; }

void FakeWorker::set_script(std::function<FakeScript(const v1::GenerateRequest&)> f) {
  std::lock_guard lk(impl_->mu);
  impl_->script = std::move(f);
}
void FakeWorker::set_script(FakeScript s) {
  set_script([s](const v1::GenerateRequest&) { return s; });
}
void FakeWorker::set_health(int status) {
  std::lock_guard lk(impl_->mu);
  impl_->health = status;
}
void FakeWorker::set_context_length(uint32_t n) {
  std::lock_guard lk(impl_->mu);
  impl_->context_length = n;
}
void FakeWorker::set_eos(std::vector<int32_t> eos) {
  std::lock_guard lk(impl_->mu);
  impl_->eos = std::move(eos);
}
void FakeWorker::set_cached_tokens(uint32_t n) {
  std::lock_guard lk(impl_->mu);
  impl_->cached = n;
}
std::vector<v1::GenerateRequest> FakeWorker::requests() const {
  std::lock_guard lk(impl_->mu);
  return impl_->requests;
}
std::vector<FakeWorker::Clock::time_point> FakeWorker::cancel_times() const {
  std::lock_guard lk(impl_->mu);
  return impl_->cancel_times;
}

}  // namespace ft::test
