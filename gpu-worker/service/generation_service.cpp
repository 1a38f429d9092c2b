#include "gpu-worker/service/generation_service.h"

#include "gpu-worker/service/constraint_request.h"

#include <atomic>
#include <chrono>

namespace ft::worker {

namespace pb = flashtier::v1;

grpc::Status GenerationService::not_ready() const {
  switch (core_.state()) {
    case WorkerCore::State::Loading: return {grpc::StatusCode::UNAVAILABLE, "the model is still loading"};
    case WorkerCore::State::Failed: return {grpc::StatusCode::UNAVAILABLE, "the model failed to load: " + core_.load_error()};
    default: return grpc::Status::OK;
  }
}

grpc::Status GenerationService::Generate(grpc::ServerContext* ctx, const pb::GenerateRequest* req,
                                         grpc::ServerWriter<pb::GenerateResponse>* writer) {
  struct Active {  // counted for the drain from before the check, so none slips past it
    std::atomic<int>& n;
    explicit Active(std::atomic<int>& a) : n(a) { n.fetch_add(1); }
    ~Active() { n.fetch_sub(1); }
  } active(active_);
  if (draining_.load()) return {grpc::StatusCode::UNAVAILABLE, "the gpu-worker is draining (shutting down)"};
  if (grpc::Status s = not_ready(); !s.ok()) return s;
  static std::atomic<uint64_t> counter{0};
  Request r;
  r.id = req->request_id().empty() ? "gen-" + std::to_string(++counter) : req->request_id();
  r.prompt.assign(req->prompt_token_ids().begin(), req->prompt_token_ids().end());
  const pb::SamplingParams& sp = req->sampling();
  SamplingConfig& c = r.params.sampling;
  c.temperature = sp.temperature();
  c.top_p = sp.top_p();
  c.top_k = sp.top_k();
  c.min_p = sp.min_p();
  c.presence_penalty = sp.presence_penalty();
  c.frequency_penalty = sp.frequency_penalty();
  c.repetition_penalty = sp.repetition_penalty() == 0.0f ? 1.0f : sp.repetition_penalty();
  if (sp.has_seed()) c.seed = sp.seed();
  if (c.temperature < 0.0f) return {grpc::StatusCode::INVALID_ARGUMENT, "temperature must be >= 0"};
  if (c.top_p < 0.0f || c.top_p > 1.0f) return {grpc::StatusCode::INVALID_ARGUMENT, "top_p must be in [0, 1]"};
  if (c.min_p < 0.0f || c.min_p > 1.0f) return {grpc::StatusCode::INVALID_ARGUMENT, "min_p must be in [0, 1]"};
  if (c.repetition_penalty < 0.0f) return {grpc::StatusCode::INVALID_ARGUMENT, "repetition_penalty must be > 0"};
  r.params.max_new_tokens = req->max_new_tokens();
  r.params.stop_token_ids.assign(req->stop_token_ids().begin(), req->stop_token_ids().end());
  r.params.ignore_eos = req->ignore_eos();
  r.params.logprobs = req->logprobs();
  r.params.top_logprobs = req->top_logprobs();
  if (grpc::Status s = read_constraints(*req, core_, r.params); !s.ok()) return s;
  std::shared_ptr<RequestStream> stream = r.stream;
  try {
    core_.scheduler().submit(std::move(r));
  } catch (const SubmitError& e) {
    const auto code = e.code == SubmitError::InvalidArgument    ? grpc::StatusCode::INVALID_ARGUMENT
                      : e.code == SubmitError::ResourceExhausted ? grpc::StatusCode::RESOURCE_EXHAUSTED
                                                                 : grpc::StatusCode::UNAVAILABLE;
    return {code, e.what()};
  }
  // The sync API has no cancellation callback: poll at a short interval so a closed stream frees
  // its slot well within 100 ms.
  std::vector<TokenEvent> tokens;
  while (true) {
    tokens.clear();
    std::optional<Outcome> done = stream->wait(tokens, std::chrono::milliseconds(20));
    if (ctx->IsCancelled()) {
      stream->cancel();
      return {grpc::StatusCode::CANCELLED, "cancelled by the client"};
    }
    if (done && !done->error.empty()) return {grpc::StatusCode::UNAVAILABLE, done->error};
    if (tokens.empty() && !done) continue;
    pb::GenerateResponse resp;
    for (const TokenEvent& t : tokens) {
      pb::GeneratedToken* g = resp.add_tokens();
      g->set_token_id(t.token);
      g->set_logprob(t.logprob);
      for (const auto& [id, lp] : t.top) {
        pb::TokenLogprob* x = g->add_top_logprobs();
        x->set_token_id(id);
        x->set_logprob(lp);
      }
    }
    if (done) {
      resp.set_finished(true);
      resp.set_finish_reason(done->reason == Finish::Stop ? pb::FINISH_REASON_STOP : pb::FINISH_REASON_LENGTH);
      resp.set_stop_token_id(done->stop_token);
      pb::Usage* u = resp.mutable_usage();
      u->set_prompt_tokens(done->prompt_tokens);
      u->set_completion_tokens(done->completion_tokens);
      u->set_cached_tokens(done->cached_tokens);
    }
    if (!writer->Write(resp)) {
      stream->cancel();
      return {grpc::StatusCode::CANCELLED, "the client went away"};
    }
    if (done) return grpc::Status::OK;
  }
}

grpc::Status GenerationService::Tokenize(grpc::ServerContext*, const pb::TokenizeRequest* req,
                                         pb::TokenizeResponse* resp) {
  if (grpc::Status s = not_ready(); !s.ok()) return s;
  if (!core_.tokenizer()) return {grpc::StatusCode::FAILED_PRECONDITION, "the model folder has no tokenizer.json"};
  for (int32_t id : core_.tokenizer()->encode(req->text())) resp->add_token_ids(id);
  return grpc::Status::OK;
}

grpc::Status GenerationService::Detokenize(grpc::ServerContext*, const pb::DetokenizeRequest* req,
                                           pb::DetokenizeResponse* resp) {
  if (grpc::Status s = not_ready(); !s.ok()) return s;
  if (!core_.tokenizer()) return {grpc::StatusCode::FAILED_PRECONDITION, "the model folder has no tokenizer.json"};
  const std::vector<int32_t> ids(req->token_ids().begin(), req->token_ids().end());
  resp->set_text(core_.tokenizer()->decode(ids, req->skip_special_tokens()));
  return grpc::Status::OK;
}

grpc::Status GenerationService::ModelInfo(grpc::ServerContext*, const pb::ModelInfoRequest*,
                                          pb::ModelInfoResponse* resp) {
  if (grpc::Status s = not_ready(); !s.ok()) return s;
  resp->set_model_name(core_.model_name());
  resp->set_model_type("glm5_next");
  resp->set_vocab_size(static_cast<uint32_t>(core_.config().vocab_size));
  resp->set_context_length(static_cast<uint32_t>(core_.context_size()));
  for (int32_t e : core_.eos_token_ids()) resp->add_eos_token_ids(e);
  resp->set_max_batch_size(static_cast<uint32_t>(core_.options().scheduler.max_batch_size));
  resp->set_has_tokenizer(core_.tokenizer() != nullptr);
  resp->set_model_dir(core_.options().model_dir);
  return grpc::Status::OK;
}

grpc::Status GenerationService::Health(grpc::ServerContext*, const pb::HealthRequest*, pb::HealthResponse* resp) {
  if (draining_.load()) {
    resp->set_status(pb::HealthResponse::NOT_SERVING);
    resp->set_detail("draining");
    return grpc::Status::OK;
  }
  switch (core_.state()) {
    case WorkerCore::State::Loading:
      resp->set_status(pb::HealthResponse::LOADING);
      resp->set_detail("loading " + core_.options().model_dir);
      break;
    case WorkerCore::State::Failed:
      resp->set_status(pb::HealthResponse::NOT_SERVING);
      resp->set_detail(core_.load_error());
      break;
    case WorkerCore::State::Ready:
      if (core_.experts_healthy()) {
        resp->set_status(pb::HealthResponse::SERVING);
      } else {
        resp->set_status(pb::HealthResponse::NOT_SERVING);
        resp->set_detail("the expert tier does not answer");
      }
      break;
  }
  return grpc::Status::OK;
}

grpc::Status GenerationService::Stats(grpc::ServerContext*, const pb::StatsRequest*, pb::StatsResponse* resp) {
  if (core_.state() != WorkerCore::State::Ready) return not_ready();
  const SchedulerStats s = core_.scheduler().stats();
  resp->set_running(s.running);
  resp->set_waiting(s.waiting);
  resp->set_generated_tokens(s.generated_tokens);
  resp->set_prompt_tokens(s.prompt_tokens);
  resp->set_cancelled(s.cancelled);
  pb::PrefixCacheStats* pc = resp->mutable_prefix_cache();
  pc->set_hits(s.prefix.hits);
  pc->set_misses(s.prefix.misses);
  pc->set_tokens_saved(s.prefix.tokens_saved);
  pc->set_snapshots(s.prefix.snapshots);
  pc->set_bytes(s.prefix.bytes);
  pc->set_budget_bytes(s.prefix.budget);
  pc->set_evictions(s.prefix.evictions);
  resp->set_backend(s.engine.backend);
  for (const auto& [name, bytes] : s.engine.memory) {
    pb::MemoryUse* m = resp->add_memory();
    m->set_category(name);
    m->set_bytes(bytes);
  }
  resp->set_memory_budget_bytes(s.engine.memory_budget);
  for (const auto& [name, value] : s.engine.counters) {
    pb::Counter* c = resp->add_counters();
    c->set_name(name);
    c->set_value(value);
  }
  return grpc::Status::OK;
}

}  // namespace ft::worker
