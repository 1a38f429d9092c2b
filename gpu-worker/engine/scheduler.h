#pragma once
// Continuous batching over the engine: every step decodes one token for each running sequence
// and spends what is left of the step's token budget (--chunk-size) on prefill chunks, so long
// prompts never stall running streams. Sequences join and leave between steps; a prefill chunk
// that does not finish its prompt ends at a multiple of the engine's prefill alignment, so a
// prompt's tokens do not depend on how it was chunked. Sampling happens inside the engine.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gpu-worker/engine/request.h"
#include "shared/engine/engine.h"

namespace ft::worker {

struct SchedulerOptions {
  int max_batch_size = 8;
  int chunk_size = 8192;       // tokens per step, decode tokens included
  int64_t context_size = 32768;
  int max_queue = 256;         // waiting requests beyond the batch
  std::vector<int32_t> eos_token_ids;
};

struct SchedulerStats {
  uint32_t running = 0, waiting = 0;
  uint64_t generated_tokens = 0, prompt_tokens = 0, cancelled = 0, failed = 0, steps = 0;
  PrefixCacheStats prefix;  // as of the last step (the engine belongs to the scheduler's thread)
  EngineStats engine;       // likewise: backend and memory per category
};

// Why a request was refused; maps onto gRPC status codes.
class SubmitError : public std::runtime_error {
 public:
  enum Code { InvalidArgument, ResourceExhausted, Unavailable };
  SubmitError(Code c, const std::string& m) : std::runtime_error(m), code(c) {}
  Code code;
};

class Scheduler {
 public:
  Scheduler(Engine& engine, SchedulerOptions opts);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates and queues; throws SubmitError.
  void submit(Request r);
  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return opts_; }

 private:
  struct Sequence {
    Request req;
    uint64_t handle = 0;  // the engine's sequence
    size_t prefilled = 0;
    uint32_t cached = 0;  // prompt tokens restored from the prefix cache
    uint32_t generated = 0;
    int32_t pending = -1;  // last sampled token, fed at the next step
    std::shared_ptr<TokenConstraint> constraint;  // what the engine masks with (null: nothing)
  };
  void loop();
  void admit();  // waiting → running while the engine accepts them (called with m_ held)
  void step(std::vector<Sequence*>& batch);
  // Streams the token the engine sampled; returns the outcome when the sequence is done.
  std::optional<Outcome> emit(Sequence& s, StepResult& r);
  // Closes the engine's sequence (m_ held); `keep`: a request that ran to its end leaves its
  // state to the prefix cache.
  void finish(std::list<Sequence>::iterator it, bool keep = false);
  // logit_bias ids and values, min_tokens against max_new_tokens, an engine that can mask.
  void check_constraints(const GenerationParams& p, int64_t vocab) const;
  // The sequence's TokenConstraint (null when nothing constrains it): grammar, min_tokens and
  // logit_bias with the end ids this request stops on.
  std::shared_ptr<TokenConstraint> make_constraint(const GenerationParams& p) const;

  Engine& engine_;
  const SchedulerOptions opts_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<Request> waiting_;
  std::list<Sequence> running_;
  SchedulerStats stats_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ft::worker
