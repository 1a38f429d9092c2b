// POST /generate in SGLang's shapes (the GLM-5.3 recipe tools use it).
#include <chrono>

#include <nlohmann/json.hpp>

#include "gateway/endpoints.h"
#include "gateway/generation.h"
#include "gateway/openai_schema.h"

namespace ft::gateway {

using json = nlohmann::ordered_json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

class SglangListener : public GenerationListener {
 public:
  SglangListener(const SglangSpec& spec, std::string id, uint32_t prompt_tokens, std::chrono::steady_clock::time_point arrival)
      : spec_(spec), id_(std::move(id)), prompt_tokens_(prompt_tokens), arrival_(arrival) {}

  std::optional<ApiError> on_step(int, ChoiceStep& step, ChoiceOutput& co, std::string& out) override {
    text_ += step.text;
    for (const auto& t : step.tokens) {
      ids_.push_back(t.id);
      if (spec_.return_logprob) {
        logprobs_.push_back(json::array({t.logprob, t.id, nullptr}));
        json top = json::array();
        for (const auto& [id, l] : t.top) top.push_back(json::array({l, id, nullptr}));
        top_.push_back(std::move(top));
      }
    }
    if (spec_.stream && (!step.text.empty() || !step.tokens.empty()) && !co.finished()) {
      out += "data: " + dump(event(nullptr)) + "\n\n";
    }
    return std::nullopt;
  }

  std::optional<ApiError> on_finish(int, const ChoiceFinish& f, ChoiceOutput& co, std::string& out) override {
    finish_ = f;
    if (f.reason == "length") {
      reason_ = {{"type", "length"}, {"length", f.completion_tokens}};
    } else {
      reason_ = {{"type", "stop"}, {"matched", nullptr}};
      if (!co.matched_stop().empty()) reason_["matched"] = co.matched_stop();
      else if (co.matched_stop_token()) reason_["matched"] = *co.matched_stop_token();
    }
    if (spec_.stream) out += "data: " + dump(event(reason_)) + "\n\n";
    return std::nullopt;
  }

  void on_end(std::string& out) override { out += "data: [DONE]\n\n"; }

  json event(const json& finish_reason) const {
    json meta = {{"id", id_},
                 {"prompt_tokens", finish_ ? finish_->prompt_tokens : prompt_tokens_},
                 {"completion_tokens", finish_ ? finish_->completion_tokens : uint32_t(ids_.size())},
                 {"cached_tokens", finish_ ? finish_->cached_tokens : 0},
                 {"finish_reason", finish_reason},
                 {"e2e_latency", std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival_).count()}};
    if (spec_.return_logprob) {
      meta["output_token_logprobs"] = logprobs_;
      if (spec_.top_logprobs > 0) meta["output_top_logprobs"] = top_;
    }
    return {{"text", text_}, {"output_ids", ids_}, {"meta_info", std::move(meta)}};
  }
  json response() const { return event(reason_); }

 private:
  const SglangSpec& spec_;
  std::string id_;
  uint32_t prompt_tokens_;
  std::chrono::steady_clock::time_point arrival_;
  std::string text_;
  std::vector<int32_t> ids_;
  json logprobs_ = json::array();
  json top_ = json::array();
  std::optional<ChoiceFinish> finish_;
  json reason_ = nullptr;
};

}  // namespace

namespace {

struct Prepared {
  SglangSpec spec;
  std::string id;
  uint32_t prompt_tokens = 0;
  GenerationPlan plan;
};

// Plain function (not a coroutine): GCC 12 mishandles initializer-list temporaries in coroutines.
std::unique_ptr<Prepared> prepare(App& app, const std::string& body) {
  auto p = std::make_unique<Prepared>();
  p->spec = parse_sglang_generate(body, {app.opts.max_n, app.model->vocab_size(), app.model->served_name()});
  const auto& spec = p->spec;
  std::vector<std::vector<int32_t>> prompts(1, spec.text ? app.model->tokenizer().encode(*spec.text) : spec.input_ids);
  if (prompts[0].empty()) throw ApiError::bad_field("text", "the text encodes to no tokens");
  if (!app.pool->any_ready()) throw ApiError{503, "no gpu-worker is ready (loading or down)", "", "service_unavailable", "no_worker"};
  if (auto e = check_context(app, prompts, spec.max_tokens, spec.text ? "text" : "input_ids", "sampling_params.max_new_tokens"))
    throw *e;
  p->prompt_tokens = static_cast<uint32_t>(prompts[0].size());
  p->id = new_request_id(app, "");
  p->plan = make_plan(app, spec, prompts, p->id);
  return p;
}

}  // namespace

asio::awaitable<int> handle_sglang_generate(App& app, HttpExchange& ex) {
  const auto arrival = std::chrono::steady_clock::now();
  std::unique_ptr<Prepared> p;
  std::optional<ApiError> err;
  try {
    p = prepare(app, ex.request().body);
  } catch (const ApiError& e) {
    err = e;
  }
  if (err) co_return co_await respond_error(ex, *err);
  p->plan.arrival = arrival;
  SglangListener listener(p->spec, p->id, p->prompt_tokens, arrival);
  GenerationOutcome o = co_await run_generation(app, ex, std::move(p->plan), listener);
  if (o.kind == GenerationOutcome::ClientGone) co_return 499;
  if (o.kind == GenerationOutcome::Failed) {
    if (!ex.responded()) co_return co_await respond_error(ex, *o.error);
    co_return o.error->status;
  }
  if (!ex.responded()) co_await ex.respond(200, "application/json", dump(listener.response()));
  co_return 200;
}

}  // namespace ft::gateway
