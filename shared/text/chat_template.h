#pragma once
// Chat templates as transformers' apply_chat_template renders them: the template comes from
// chat_template.jinja in the model directory, else tokenizer_config.json's chat_template; the
// variables are messages, tools, documents, add_generation_prompt, the named special tokens of
// tokenizer_config.json, and request kwargs (reasoning_effort, chat_template_kwargs...).
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "shared/text/jinja_value.h"

namespace ft::jinja {
class Template;
}

namespace ft::text {

struct ChatRequest {
  std::string messages_json = "[]";  // JSON array of messages
  std::string tools_json;            // JSON array of tools; empty means none
  bool add_generation_prompt = true;
  std::string kwargs_json;           // JSON object of extra template variables; empty means none
};

class ChatTemplate {
 public:
  // Throws ft::Error naming the file when there is no template or it does not parse.
  static ChatTemplate from_model_dir(const std::filesystem::path& dir);
  // A template file; special tokens come from `tokenizer_config` when given.
  static ChatTemplate from_file(const std::filesystem::path& file, const std::filesystem::path& tokenizer_config = {});
  ChatTemplate(std::string_view source, std::string name);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // Throws ft::Error (jinja::TemplateError) with the template name and line on failure.
  std::string render(const ChatRequest& req) const;
  std::string render(const jinja::Value& messages, const jinja::Value& tools, bool add_generation_prompt,
                     const jinja::Value& kwargs) const;

  // From an OpenAI chat-completions request body: messages (tool-call argument strings parsed
  // into objects, `reasoning` copied to `reasoning_content`), tools, add_generation_prompt
  // (default true), reasoning_effort / enable_thinking / clear_thinking, and every entry of
  // chat_template_kwargs (which win).
  std::string render_openai_request(std::string_view request_json) const;

  // Named special tokens (bos_token, eos_token...) read from tokenizer_config.json.
  void load_special_tokens(const std::filesystem::path& tokenizer_config);
  const std::string& name() const;

 private:
  std::unique_ptr<jinja::Template> tpl_;
  jinja::Value special_tokens_;
};

}  // namespace ft::text
