#include "gateway/choice_output.h"

namespace ft::gateway {

namespace v1 = flashtier::v1;

ChoiceOutput::ChoiceOutput(const text::Tokenizer& tok, Options opts)
    : tok_(&tok), opts_(std::move(opts)), detok_(tok, false), stop_(opts_.stop, opts_.include_stop_str) {}

void ChoiceOutput::consume(const OutToken& t, ChoiceStep& step) {
  ++consumed_;
  ids_.push_back(t.id);
  step.tokens.push_back(t);
  if (opts_.skip_special_tokens && tok_->is_special(t.id) && !opts_.keep_special.count(t.id)) return;
  std::string piece = detok_.push(t.id);
  if (piece.empty()) return;
  auto r = stop_.push(piece);
  step.text += r.text;
  if (r.stopped) matched_ = r.matched;
}

void ChoiceOutput::finish_text(ChoiceStep& step) {
  if (!stop_.stopped()) {
    std::string rest = detok_.finish();
    if (!rest.empty()) {
      auto r = stop_.push(rest);
      step.text += r.text;
      if (r.stopped) matched_ = r.matched;
    }
    step.text += stop_.flush();
  }
}

ChoiceStep ChoiceOutput::push(const v1::GenerateResponse& msg) {
  ChoiceStep step;
  if (finished_) return step;
  for (const auto& g : msg.tokens()) {
    if (stop_.stopped()) break;
    if (held_) {
      consume(*held_, step);
      held_.reset();
      if (stop_.stopped()) break;
    }
    OutToken t;
    t.id = g.token_id();
    t.logprob = g.logprob();
    t.top.reserve(g.top_logprobs_size());
    for (const auto& a : g.top_logprobs()) t.top.emplace_back(a.token_id(), a.logprob());
    if (opts_.stop_ids.count(t.id)) {
      held_ = std::move(t);
      continue;
    }
    consume(t, step);
  }
  if (stop_.stopped()) {
    finished_ = true;
    held_.reset();
    return step;
  }
  if (msg.finished()) {
    if (held_) {
      if (msg.finish_reason() == v1::FINISH_REASON_STOP) {
        ++consumed_;  // counted as generated, never shown
        stop_token_ = held_->id;
      } else {
        consume(*held_, step);
      }
      held_.reset();
    } else if (msg.finish_reason() == v1::FINISH_REASON_STOP && msg.stop_token_id() > 0) {  // -1: a completed constraint
      stop_token_ = msg.stop_token_id();
    }
    finish_text(step);
    finished_ = true;
  }
  return step;
}

ChoiceStep ChoiceOutput::flush() {
  ChoiceStep step;
  if (finished_) return step;
  if (held_ && !stop_.stopped()) consume(*held_, step);
  held_.reset();
  finish_text(step);
  finished_ = true;
  return step;
}

}  // namespace ft::gateway
