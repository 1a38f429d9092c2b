#pragma once
// What the gateway reads from the model folder: tokenizer, chat template, EOS ids, and the name it
// serves the model under. Never weights.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/text/tokenizer.h"

namespace ft::gateway {

class ChatPromptRenderer;

class ModelContext {
 public:
  // Throws ft::Error naming the file when the tokenizer or configuration cannot be read. A missing
  // or broken chat template is not fatal: chat requests then fail with a clear message.
  static std::shared_ptr<ModelContext> load(const std::string& model_dir, const std::string& served_name);
  ~ModelContext();

  const text::Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  const std::string& served_name() const { return served_name_; }
  const std::string& model_dir() const { return model_dir_; }
  int32_t think_id() const { return think_id_; }          // -1 when the vocabulary has none
  int32_t end_think_id() const { return end_think_id_; }
  // The model's vocabulary (config.json vocab_size, else the tokenizer's): request token ids are
  // checked against it; an id with no token decodes to nothing.
  size_t vocab_size() const { return vocab_size_; }

  bool has_chat_template() const;
  const std::string& chat_template_error() const { return template_error_; }
  // Renders an OpenAI chat request (messages, tools, reasoning_effort, chat_template_kwargs,
  // add_generation_prompt) with the model's template. Throws ft::Error on template failures.
  std::string render_chat(const std::string& request_json) const;

 private:
  ModelContext() = default;
  std::string model_dir_;
  std::string served_name_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<ChatPromptRenderer> chat_;
  std::string template_error_;
  std::vector<int32_t> eos_ids_;
  int32_t think_id_ = -1;
  int32_t end_think_id_ = -1;
  size_t vocab_size_ = 0;
};

}  // namespace ft::gateway
