#include "gpu-worker/engine/scheduler.h"

#include <algorithm>

#include "shared/core/error.h"

namespace ft::worker {

Scheduler::Scheduler(Engine& engine, SchedulerOptions opts) : engine_(engine), opts_(std::move(opts)) {
  stats_.engine = engine_.stats();
  stats_.prefix = engine_.prefix_stats();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  stop_ = true;
  cv_.notify_all();
  thread_.join();
  std::lock_guard<std::mutex> l(m_);
  for (auto it = running_.begin(); it != running_.end();) {
    auto next = std::next(it);
    finish(it);
    it = next;
  }
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
  check_constraints(r.params, c.vocab_size);
  const int64_t most = engine_.max_tokens_per_sequence();
  if (n + static_cast<int64_t>(r.params.max_new_tokens) > most)
    throw SubmitError(SubmitError::ResourceExhausted,
                      std::to_string(n) + " prompt tokens + " + std::to_string(r.params.max_new_tokens) +
                          " new tokens do not fit this worker's memory (at most " + std::to_string(most) +
                          " tokens per sequence); ask for fewer max_tokens");
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

void Scheduler::check_constraints(const GenerationParams& p, int64_t vocab) const {
  if (!p.constrained()) return;
  if (!engine_.supports_constraints())
    throw SubmitError(SubmitError::InvalidArgument,
                      "constraints (grammar, min_tokens, logit_bias) are not supported by this worker's backend yet");
  for (const auto& [id, b] : p.logit_bias) {
    if (id < 0 || id >= vocab)
      throw SubmitError(SubmitError::InvalidArgument, "logit_bias token id " + std::to_string(id) +
                                                          " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    if (!(b >= -100.0f && b <= 100.0f))
      throw SubmitError(SubmitError::InvalidArgument, "logit_bias values must be in [-100, 100], got " + std::to_string(b) +
                                                          " for token " + std::to_string(id));
  }
  if (p.min_tokens > p.max_new_tokens)
    throw SubmitError(SubmitError::InvalidArgument, "min_tokens (" + std::to_string(p.min_tokens) +
                                                        ") is more than max_new_tokens (" +
                                                        std::to_string(p.max_new_tokens) + ")");
}

std::shared_ptr<TokenConstraint> Scheduler::make_constraint(const GenerationParams& p) const {
  if (!p.constrained()) return nullptr;
  ConstraintOptions o;
  o.vocab_size = static_cast<size_t>(engine_.config().vocab_size);
  if (!p.ignore_eos) o.end_ids = opts_.eos_token_ids;
  o.end_ids.insert(o.end_ids.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
  o.min_tokens = p.min_tokens;
  o.logit_bias = p.logit_bias;
  return std::make_shared<TokenConstraint>(std::move(o), p.grammar);
}

void Scheduler::finish(std::list<Sequence>::iterator it, bool keep) {
  if (keep) engine_.keep_prefix(it->handle);
  engine_.close(it->handle);
  running_.erase(it);
}

void Scheduler::admit() {
  while (!waiting_.empty() && running_.size() < static_cast<size_t>(opts_.max_batch_size)) {
    Request& r = waiting_.front();
    SequenceSpec spec;
    spec.sampling = r.params.sampling;
    spec.logprobs = r.params.logprobs;
    spec.top_logprobs = static_cast<int32_t>(r.params.top_logprobs);
    spec.max_tokens = static_cast<int64_t>(r.prompt.size()) + r.params.max_new_tokens;
    spec.constraint = make_constraint(r.params);
    uint64_t handle = 0;
    try {
      handle = engine_.open(spec);
    } catch (const EngineFull&) {
      // Memory held by running sequences: the request waits until one of them finishes. Alone
      // it always fits (submit checked max_tokens_per_sequence), so this cannot wait forever.
      if (!running_.empty()) return;
      Outcome o;
      o.error = "the engine cannot hold this request even alone";
      r.stream->finish(std::move(o));
      waiting_.pop_front();
      ++stats_.failed;
      continue;
    } catch (const std::exception& e) {
      Outcome o;
      o.error = e.what();
      r.stream->finish(std::move(o));
      waiting_.pop_front();
      ++stats_.failed;
      continue;
    }
    // The longest cached prefix of the prompt is restored; prefill starts after it.
    int64_t cached = 0;
    try {
      cached = engine_.restore_prefix(handle, r.prompt);
    } catch (const std::exception&) {
      cached = 0;  // a cache that cannot restore only costs a cold prefill
    }
    running_.push_back(Sequence{std::move(r), handle, static_cast<size_t>(cached), static_cast<uint32_t>(cached)});
    running_.back().constraint = spec.constraint;
    waiting_.pop_front();
  }
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
        auto next = std::next(it);
        if (it->req.stream->cancelled()) {
          ++stats_.cancelled;
          finish(it);
        }
        it = next;
      }
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (it->stream->cancelled()) {
          ++stats_.cancelled;
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
      admit();
      batch.clear();
      for (auto& s : running_) batch.push_back(&s);
      if (batch.empty() && !waiting_.empty()) {
        // Nothing runs and the head of the queue does not fit yet: wait for news.
        cv_.wait_for(l, std::chrono::milliseconds(10));
        continue;
      }
    }
    if (!batch.empty()) step(batch);
  }
}

void Scheduler::step(std::vector<Sequence*>& batch) {
  // Decode tokens first (one per running sequence), then prefill chunks in arrival order.
  std::vector<StepItem> items;
  std::vector<Sequence*> owners;
  int64_t budget = opts_.chunk_size;
  const int64_t align = std::max<int64_t>(engine_.prefill_alignment(), 1);
  for (Sequence* s : batch)
    if (s->pending >= 0) {
      items.push_back({s->handle, std::span<const int32_t>(&s->pending, 1), false, true, LogitsWanted::None});
      owners.push_back(s);
      --budget;
    }
  for (Sequence* s : batch) {
    if (s->pending >= 0 || budget <= 0) continue;
    const int64_t left = static_cast<int64_t>(s->req.prompt.size() - s->prefilled);
    int64_t n = std::min(left, budget);
    if (n < left) n = std::max(n / align * align, std::min(left, align));  // cut at the alignment
    const bool last = n == left;
    items.push_back({s->handle, std::span<const int32_t>(s->req.prompt).subspan(s->prefilled, static_cast<size_t>(n)),
                     true, last, LogitsWanted::None});
    owners.push_back(s);
    budget -= n;
  }
  std::string failure;
  std::vector<StepResult> results;
  try {
    engine_.step(items, results);
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
    if (std::optional<Outcome> o = emit(s, results[i])) {
      outcomes.emplace_back(s.req.stream, std::move(*o));
      done.push_back(&s);
    }
  }
  {
    std::lock_guard<std::mutex> l(m_);
    ++stats_.steps;
    stats_.prefix = engine_.prefix_stats();
    stats_.engine = engine_.stats();
    stats_.prompt_tokens += prompt_tokens;
    stats_.generated_tokens += new_tokens;
    if (!failure.empty()) stats_.failed += done.size();
    for (auto it = running_.begin(); it != running_.end();) {
      auto next = std::next(it);
      if (std::find(done.begin(), done.end(), &*it) != done.end()) finish(it, failure.empty());
      it = next;
    }
  }
  for (auto& [stream, o] : outcomes) stream->finish(std::move(o));
}

std::optional<Outcome> Scheduler::emit(Sequence& s, StepResult& r) {
  const GenerationParams& p = s.req.params;
  const int32_t tok = r.token;
  TokenEvent ev;
  ev.token = tok;
  ev.logprob = r.logprob;
  ev.top = std::move(r.top);
  s.req.stream->push(std::move(ev));
  ++s.generated;
  const bool eos = !p.ignore_eos && std::find(opts_.eos_token_ids.begin(), opts_.eos_token_ids.end(), tok) !=
                                        opts_.eos_token_ids.end();
  const bool stop_id = eos || std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end();
  // A grammar that is complete and admits nothing more ends the sequence here: only end ids
  // could follow, and with ignore_eos there may be none.
  const bool stop = stop_id || (s.constraint && s.constraint->complete());
  const bool length = s.generated >= p.max_new_tokens ||
                      static_cast<int64_t>(s.req.prompt.size() + s.generated) >= opts_.context_size;
  if (stop || length) {
    Outcome o;
    o.reason = stop ? Finish::Stop : Finish::Length;
    o.stop_token = stop_id ? tok : -1;
    o.prompt_tokens = static_cast<uint32_t>(s.req.prompt.size());
    o.completion_tokens = s.generated;
    o.cached_tokens = s.cached;
    return o;
  }
  s.pending = tok;
  return std::nullopt;
}

}  // namespace ft::worker
