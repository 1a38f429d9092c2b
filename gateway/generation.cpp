#include "gateway/generation.h"

#include <deque>
#include <memory>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ft::gateway {

namespace v1 = flashtier::v1;
using clock_type = std::chrono::steady_clock;

void GenerationListener::on_error(const ApiError& e, std::string& out) {
  out += "data: ";
  out += error_json(e);
  out += "\n\ndata: [DONE]\n\n";
}

ApiError worker_error(int code, const std::string& message) {
  switch (code) {
    case 8:  // RESOURCE_EXHAUSTED
      return ApiError{429, "the gpu-worker's queue is full, retry later: " + message, "", "rate_limit_error", "queue_full"};
    case 14:  // UNAVAILABLE
      return ApiError{503, "gpu-worker unavailable: " + message, "", "service_unavailable", "worker_unavailable"};
    case 3:  // INVALID_ARGUMENT
      return ApiError{400, message, "", "invalid_request_error", "invalid_value"};
    case 4:  // DEADLINE_EXCEEDED
      return ApiError{504, "gpu-worker timed out: " + message, "", "server_error", "worker_timeout"};
    case 1:  // CANCELLED
      return ApiError{503, "generation was cancelled by the gpu-worker: " + message, "", "server_error", "worker_cancelled"};
    default:
      return ApiError{500, "gpu-worker error (grpc status " + std::to_string(code) + "): " + message, "", "server_error",
                      "worker_error"};
  }
}

namespace {

struct RunState {
  explicit RunState(asio::any_io_executor e) : ex(e), wake(e) {}
  asio::any_io_executor ex;
  asio::steady_timer wake;
  std::deque<std::pair<int, GenerateEvent>> events;
  std::vector<std::shared_ptr<GenerateCall>> calls;
  std::vector<bool> live;  // call not finished from the gateway's point of view
  bool gone = false;
  void cancel_live() {
    for (size_t i = 0; i < calls.size(); ++i)
      if (live[i] && calls[i]) calls[i]->cancel();
  }
};

EventSink make_sink(const std::shared_ptr<RunState>& st, int i) {
  return [st, i](GenerateEvent&& ev) {
    asio::post(st->ex, [st, i, ev = std::move(ev)]() mutable {
      st->events.emplace_back(i, std::move(ev));
      st->wake.cancel();
    });
  };
}

enum class Stage { Waiting, Running, Done };

struct ChoiceRun {
  ChoiceRun(const text::Tokenizer& tok, ChoiceOutput::Options o, uint32_t prompt)
      : out(tok, std::move(o)), prompt_tokens(prompt) {}
  ChoiceOutput out;
  Stage stage = Stage::Waiting;
  int retries = 0;
  uint32_t prompt_tokens;
  clock_type::time_point last{};
};

double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

asio::awaitable<GenerationOutcome> run_generation(App& app, HttpExchange& ex, GenerationPlan plan,
                                                  GenerationListener& listener) {
  GenerationOutcome outcome;
  const int n = static_cast<int>(plan.requests.size());
  Metrics& m = app.metrics;

  // Admission: the gateway's own queue limit.
  struct Admission {
    std::atomic<int>& a;
    int n;
    ~Admission() { a.fetch_sub(n); }
  } admission{app.admitted_streams, n};
  if (app.admitted_streams.fetch_add(n) + n > app.opts.max_queue) {
    m.rejected_queue_full.fetch_add(1);
    outcome.kind = GenerationOutcome::Failed;
    outcome.error = ApiError{429,
                             "too many requests in flight (--max-queue " + std::to_string(app.opts.max_queue) +
                                 "); retry later",
                             "", "rate_limit_error", "queue_full"};
    co_return outcome;
  }

  auto st = std::make_shared<RunState>(ex.executor());
  std::vector<ChoiceRun> runs;
  runs.reserve(n);
  for (int i = 0; i < n; ++i)
    runs.emplace_back(app.model->tokenizer(), plan.outputs[i], plan.requests[i].prompt_token_ids_size());
  st->calls.resize(n);
  st->live.assign(n, true);
  for (int i = 0; i < n; ++i) {
    std::string why;
    st->calls[i] = app.pool->generate(plan.requests[i], make_sink(st, i), &why);
    if (!st->calls[i]) {
      st->live.assign(n, true);
      st->cancel_live();
      st->calls.clear();
      st->live.clear();
      outcome.kind = GenerationOutcome::Failed;
      outcome.error = ApiError{503, why, "", "service_unavailable", "no_worker"};
      co_return outcome;
    }
  }
  m.streams_started.fetch_add(n);
  m.streams_waiting.fetch_add(n);
  for (int i = 0; i < n; ++i) {
    m.prompt_tokens.fetch_add(plan.requests[i].prompt_token_ids_size());
    m.prompt_len.observe(plan.requests[i].prompt_token_ids_size());
  }

  ex.watch_disconnect([st] {
    st->gone = true;
    st->cancel_live();
    st->wake.cancel();
  });

  // Takes a choice out of the gauges; cancels its stream when the worker has not finished it.
  auto retire = [&](int i, bool cancel_call) {
    ChoiceRun& r = runs[i];
    if (r.stage == Stage::Waiting) m.streams_waiting.fetch_sub(1);
    if (r.stage == Stage::Running) m.streams_running.fetch_sub(1);
    if (r.stage != Stage::Done) {
      m.e2e.observe(seconds(clock_type::now() - plan.arrival));
      m.completion_len.observe(r.out.consumed_tokens());
    }
    r.stage = Stage::Done;
    if (cancel_call && st->live[i]) {
      st->calls[i]->cancel();
      m.streams_cancelled.fetch_add(1);
    }
    st->live[i] = false;
  };

  int remaining = n;
  bool headers = false;
  bool gone = false;
  std::string out;
  std::optional<ApiError> abort_error;
  const auto keepalive = std::chrono::milliseconds(app.opts.keepalive_ms);

  for (;;) {
    while (!st->events.empty() && !st->gone && !abort_error) {
      auto [i, ev] = std::move(st->events.front());
      st->events.pop_front();
      ChoiceRun& r = runs[i];
      if (ev.ended) {
        if (r.stage == Stage::Done) continue;
        if (ev.status_code == 0) {  // ended without a `finished` message: take what came
          ChoiceStep step = r.out.flush();
          if (auto e = listener.on_step(i, step, r.out, out)) {
            abort_error = e;
            break;
          }
          ChoiceFinish f{"stop", r.prompt_tokens, r.out.consumed_tokens(), 0};
          st->live[i] = false;
          retire(i, false);
          --remaining;
          if (auto e = listener.on_finish(i, f, r.out, out)) abort_error = e;
          continue;
        }
        if (ev.status_code == 14 && r.out.consumed_tokens() == 0 && r.retries < 2) {
          // The worker went away before producing anything: try another one.
          std::string why;
          if (auto c = app.pool->generate(plan.requests[i], make_sink(st, i), &why)) {
            st->calls[i] = std::move(c);
            ++r.retries;
            m.streams_started.fetch_add(1);
            continue;
          }
        }
        st->live[i] = false;
        abort_error = worker_error(ev.status_code, ev.status_message);
        break;
      }
      if (r.stage == Stage::Done) continue;
      const v1::GenerateResponse& msg = ev.msg;
      const int k = msg.tokens_size();
      auto now = clock_type::now();
      if (k > 0) {
        if (r.stage == Stage::Waiting) {
          r.stage = Stage::Running;
          m.streams_waiting.fetch_sub(1);
          m.streams_running.fetch_add(1);
          m.ttft.observe(seconds(now - plan.arrival));
        } else {
          m.inter_token.observe(seconds(now - r.last) / k, static_cast<uint64_t>(k));
        }
        r.last = now;
        m.generation_tokens.fetch_add(k);
      }
      ChoiceStep step = r.out.push(msg);
      if (auto e = listener.on_step(i, step, r.out, out)) {
        abort_error = e;
        break;
      }
      if (r.out.finished()) {
        ChoiceFinish f;
        const bool by_string = r.out.stopped_by_string() && !msg.finished();
        f.reason = (!by_string && msg.finish_reason() == v1::FINISH_REASON_LENGTH) ? "length" : "stop";
        f.prompt_tokens = msg.has_usage() && msg.usage().prompt_tokens() ? msg.usage().prompt_tokens() : r.prompt_tokens;
        f.completion_tokens = (!by_string && msg.has_usage()) ? msg.usage().completion_tokens() : r.out.consumed_tokens();
        f.cached_tokens = msg.has_usage() ? msg.usage().cached_tokens() : 0;
        m.cached_prompt_tokens.fetch_add(f.cached_tokens);
        retire(i, by_string);
        --remaining;
        if (auto e = listener.on_finish(i, f, r.out, out)) abort_error = e;
      }
    }
    if (st->gone || abort_error || remaining == 0) break;
    if (plan.stream && !out.empty()) {
      if (!headers) {
        headers = true;
        std::string first;
        listener.on_start(first);
        out.insert(0, first);
        if (!co_await ex.begin_events()) {
          gone = true;
          break;
        }
      }
      if (!co_await ex.write(std::move(out))) {
        gone = true;
        break;
      }
      out.clear();
      continue;  // events may have arrived while writing
    }
    st->wake.expires_after(keepalive);
    boost::system::error_code ec;
    co_await st->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!ec && plan.stream && st->events.empty() && !st->gone) {
      // Nothing for a whole keep-alive period (long prefill, slow worker): an SSE comment keeps
      // proxies and clients from timing out.
      if (!headers) {
        headers = true;
        listener.on_start(out);
        if (!co_await ex.begin_events()) {
          gone = true;
          break;
        }
      }
      out += ": keep-alive\n\n";
      if (!co_await ex.write(std::move(out))) {
        gone = true;
        break;
      }
      out.clear();
    }
  }

  if (st->gone || gone) {
    st->gone = true;
    m.client_disconnects.fetch_add(1);
    for (int i = 0; i < n; ++i)
      if (runs[i].stage != Stage::Done) retire(i, true);
    outcome.kind = GenerationOutcome::ClientGone;
  } else if (abort_error) {
    for (int i = 0; i < n; ++i)
      if (runs[i].stage != Stage::Done) retire(i, true);
    outcome.kind = GenerationOutcome::Failed;
    outcome.error = abort_error;
    if (headers) {
      std::string tail = std::move(out);
      listener.on_error(*abort_error, tail);
      if (co_await ex.write(std::move(tail))) co_await ex.end_events();
    }
  } else if (plan.stream) {
    if (!headers) {
      headers = true;
      std::string first;
      listener.on_start(first);
      out.insert(0, first);
      if (!co_await ex.begin_events()) gone = true;
    }
    if (!gone) {
      listener.on_end(out);
      if (co_await ex.write(std::move(out))) co_await ex.end_events();
    }
  }
  co_await ex.unwatch_disconnect();
  st->cancel_live();
  st->calls.clear();
  co_return outcome;
}

}  // namespace ft::gateway

namespace ft::gateway {

GenerationPlan make_plan(const App& app, const CommonFields& c, const std::vector<std::vector<int32_t>>& prompts,
                         const std::string& request_id, const std::set<int32_t>& keep_special) {
  GenerationPlan plan;
  plan.stream = c.stream;
  std::set<int32_t> stop_ids(c.stop_token_ids.begin(), c.stop_token_ids.end());
  if (!c.ignore_eos) {
    stop_ids.insert(app.model->eos_ids().begin(), app.model->eos_ids().end());
    if (auto info = app.pool->model_info()) stop_ids.insert(info->eos_token_ids().begin(), info->eos_token_ids().end());
  }
  int idx = 0;
  for (const auto& p : prompts) {
    for (int k = 0; k < c.n; ++k, ++idx) {
      v1::GenerateRequest r;
      r.set_request_id(request_id + "-" + std::to_string(idx));
      r.mutable_prompt_token_ids()->Assign(p.begin(), p.end());
      auto* s = r.mutable_sampling();
      s->set_temperature(c.sampling.temperature);
      s->set_top_p(c.sampling.top_p);
      s->set_top_k(c.sampling.top_k);
      s->set_min_p(c.sampling.min_p);
      s->set_presence_penalty(c.sampling.presence_penalty);
      s->set_frequency_penalty(c.sampling.frequency_penalty);
      s->set_repetition_penalty(c.sampling.repetition_penalty);
      // n > 1 with one seed: distinct but reproducible streams.
      if (c.sampling.seed) s->set_seed(*c.sampling.seed + static_cast<uint64_t>(k));
      r.set_max_new_tokens(c.max_tokens.value_or(0));
      r.mutable_stop_token_ids()->Assign(c.stop_token_ids.begin(), c.stop_token_ids.end());
      r.set_ignore_eos(c.ignore_eos);
      r.set_logprobs(c.logprobs);
      r.set_top_logprobs(c.logprobs ? static_cast<uint32_t>(c.top_logprobs) : 0);
      to_proto(c.constraint, r);
      plan.requests.push_back(std::move(r));
      ChoiceOutput::Options o;
      o.skip_special_tokens = c.skip_special_tokens;
      o.keep_special = keep_special;
      o.stop = c.stop;
      o.include_stop_str = c.include_stop_str;
      o.stop_ids = stop_ids;
      plan.outputs.push_back(std::move(o));
    }
  }
  return plan;
}

std::optional<ApiError> check_context(const App& app, const std::vector<std::vector<int32_t>>& prompts,
                                      std::optional<uint32_t> max_tokens, const std::string& prompt_param,
                                      const std::string& max_tokens_param) {
  auto info = app.pool->model_info();
  if (!info || info->context_length() == 0) return std::nullopt;
  const uint64_t ctx = info->context_length();
  for (const auto& p : prompts) {
    if (p.size() >= ctx)
      return ApiError{400,
                      "the prompt is " + std::to_string(p.size()) + " tokens; this model's context length is " +
                          std::to_string(ctx) + " tokens, which leaves no room to generate",
                      prompt_param, "invalid_request_error", "context_length_exceeded"};
    if (max_tokens && *max_tokens > 0 && p.size() + *max_tokens > ctx)
      return ApiError{400,
                      "this model's context length is " + std::to_string(ctx) + " tokens; the prompt (" +
                          std::to_string(p.size()) + " tokens) plus " + max_tokens_param + " (" +
                          std::to_string(*max_tokens) + ") exceeds it",
                      max_tokens_param, "invalid_request_error", "context_length_exceeded"};
  }
  return std::nullopt;
}

}  // namespace ft::gateway
