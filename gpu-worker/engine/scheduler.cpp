#include "gpu-worker/engine/scheduler.h"

#include <algorithm>

#include "shared/core/error.h"
#include "shared/sampling/logprobs.h"

namespace ft::worker {

Scheduler::Scheduler(ReferenceEngine& engine, SchedulerOptions opts) : engine_(engine), opts_(std::move(opts)) {
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  stop_ = true;
  cv_.notify_all();
  thread_.join();
}

void Scheduler::submit(Request r) {
  const ModelConfig& c = engine_.config();
  if (r.prompt.empty()) throw SubmitError(SubmitError::InvalidArgument, "prompt_token_ids is empty");
  for (int32_t t : r.prompt)
    if (t < 0 || t >= c.vocab_size)
      throw SubmitError(SubmitError::InvalidArgument, "prompt token id " + std::to_string(t) +
                                                          " is outside the vocabulary [0, " +
                                                          std::to_string(c.vocab_size) + ")");
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  if (n >= opts_.context_size)
    throw SubmitError(SubmitError::InvalidArgument, "the prompt has " + std::to_string(n) +
                                                        " tokens; this server's context is " +
                                                        std::to_string(opts_.context_size) + " tokens");
  if (r.params.max_new_tokens == 0) r.params.max_new_tokens = static_cast<uint32_t>(opts_.context_size - n);
  if (n + r.params.max_new_tokens > opts_.context_size)
    throw SubmitError(SubmitError::InvalidArgument,
                      "this server's context is " + std::to_string(opts_.context_size) + " tokens, but " +
                          std::to_string(n) + " prompt tokens + " + std::to_string(r.params.max_new_tokens) +
                          " new tokens were requested");
  if (r.params.top_logprobs > 20) throw SubmitError(SubmitError::InvalidArgument, "top_logprobs must be at most 20");
  {
    std::lock_guard<std::mutex> l(m_);
    const size_t free_slots = static_cast<size_t>(opts_.max_batch_size) - std::min(running_.size(), static_cast<size_t>(opts_.max_batch_size));
    if (waiting_.size() >= static_cast<size_t>(opts_.max_queue) + free_slots)
      throw SubmitError(SubmitError::ResourceExhausted, "the request queue is full (" +
                                                            std::to_string(opts_.max_queue) + " waiting)");
    waiting_.push_back(std::move(r));
  }
  cv_.notify_all();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> l(m_);
  SchedulerStats s = stats_;
  s.running = static_cast<uint32_t>(running_.size());
  s.waiting = static_cast<uint32_t>(waiting_.size());
  return s;
}

void Scheduler::loop() {
  std::vector<Sequence*> batch;
  while (!stop_) {
    {
      std::unique_lock<std::mutex> l(m_);
      cv_.wait(l, [&] { return stop_ || !waiting_.empty() || !running_.empty(); });
      if (stop_) break;
      // Cancelled requests leave first: their slot is free for this very step.
      for (auto it = running_.begin(); it != running_.end();) {
        if (it->req.stream->cancelled()) {
          ++stats_.cancelled;
          it = running_.erase(it);
        } else {
          ++it;
        }
      }
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (it->stream->cancelled()) {
          ++stats_.cancelled;
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
      while (!waiting_.empty() && running_.size() < static_cast<size_t>(opts_.max_batch_size)) {
        Request r = std::move(waiting_.front());
        waiting_.pop_front();
        TokenHistory h;
        h.add_prompt(r.prompt);
        Sampler sampler(r.params.sampling);
        running_.push_back(Sequence{std::move(r), engine_.new_state(), std::move(sampler), std::move(h)});
      }
      batch.clear();
      for (auto& s : running_) batch.push_back(&s);
    }
    if (!batch.empty()) step(batch);
  }
}

void Scheduler::step(std::vector<Sequence*>& batch) {
  // Decode tokens first (one per running sequence), then prefill chunks in arrival order.
  std::vector<ForwardItem> items;
  std::vector<Sequence*> owners;
  int64_t budget = opts_.chunk_size;
  for (Sequence* s : batch)
    if (s->pending >= 0) {
      items.push_back({&s->state, std::span<const int32_t>(&s->pending, 1), false, {}});
      owners.push_back(s);
      --budget;
    }
  for (Sequence* s : batch) {
    if (s->pending >= 0 || budget <= 0) continue;
    const size_t n = std::min<size_t>(s->req.prompt.size() - s->prefilled, static_cast<size_t>(budget));
    items.push_back({&s->state, std::span<const int32_t>(s->req.prompt).subspan(s->prefilled, n), false, {}});
    owners.push_back(s);
    budget -= static_cast<int64_t>(n);
  }
  std::string failure;
  try {
    engine_.forward(items);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  // Outcomes are delivered after the finished sequences left the batch, so a client that sees
  // its stream end also sees its slot free.
  std::vector<const Sequence*> done;
  std::vector<std::pair<std::shared_ptr<RequestStream>, Outcome>> outcomes;
  uint64_t prompt_tokens = 0, new_tokens = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    Sequence& s = *owners[i];
    if (!failure.empty()) {
      Outcome o;
      o.error = failure;
      outcomes.emplace_back(s.req.stream, std::move(o));
      done.push_back(&s);
      continue;
    }
    if (s.pending < 0) {
      s.prefilled += items[i].tokens.size();
      prompt_tokens += items[i].tokens.size();
      if (s.prefilled < s.req.prompt.size()) continue;  // more prompt to go
    }
    ++new_tokens;
    if (std::optional<Outcome> o = emit(s, items[i].logits)) {
      outcomes.emplace_back(s.req.stream, std::move(*o));
      done.push_back(&s);
    }
  }
  {
    std::lock_guard<std::mutex> l(m_);
    ++stats_.steps;
    stats_.prompt_tokens += prompt_tokens;
    stats_.generated_tokens += new_tokens;
    if (!failure.empty()) stats_.failed += done.size();
    running_.remove_if([&](const Sequence& s) { return std::find(done.begin(), done.end(), &s) != done.end(); });
  }
  for (auto& [stream, o] : outcomes) stream->finish(std::move(o));
}

std::optional<Outcome> Scheduler::emit(Sequence& s, std::vector<float>& logits) {
  const GenerationParams& p = s.req.params;
  std::vector<float> raw;
  if (p.logprobs || p.top_logprobs > 0) raw = logits;
  const int32_t tok = s.sampler.sample(logits, s.history);
  TokenEvent ev;
  ev.token = tok;
  if (!raw.empty()) {
    TokenLogprobs lp = token_logprobs(raw, tok, static_cast<int32_t>(p.top_logprobs));
    ev.logprob = lp.chosen;
    ev.top = std::move(lp.top);
  }
  s.req.stream->push(std::move(ev));
  s.history.add_generated(tok);
  ++s.generated;
  const bool eos = !p.ignore_eos && std::find(opts_.eos_token_ids.begin(), opts_.eos_token_ids.end(), tok) !=
                                        opts_.eos_token_ids.end();
  const bool stop = eos || std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end();
  const bool length = s.generated >= p.max_new_tokens ||
                      static_cast<int64_t>(s.req.prompt.size() + s.generated) >= opts_.context_size;
  if (stop || length) {
    Outcome o;
    o.reason = stop ? Finish::Stop : Finish::Length;
    o.stop_token = stop ? tok : -1;
    o.prompt_tokens = static_cast<uint32_t>(s.req.prompt.size());
    o.completion_tokens = s.generated;
    return o;
  }
  s.pending = tok;
  return std::nullopt;
}

}  // namespace ft::worker
