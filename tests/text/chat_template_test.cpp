#include "shared/text/chat_template.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "shared/core/error.h"
#include "shared/text/tokenizer.h"
#include "tests/text/test_util.h"

namespace ft::text {
namespace {

using testing::fixture;
using testing::read_file;
using ojson = nlohmann::ordered_json;

const Tokenizer& glm() {
  static const Tokenizer t = Tokenizer::from_file(fixture("glm-text/tokenizer.json"));
  return t;
}

ChatRequest request_of(const ojson& c) {
  ChatRequest r;
  r.messages_json = c["messages"].dump();
  if (!c["tools"].is_null()) r.tools_json = c["tools"].dump();
  r.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  r.kwargs_json = c["template_kwargs"].dump();
  return r;
}

void check_golden(const ChatTemplate& tpl, const std::string& golden_file) {
  const auto golden = ojson::parse(read_file(fixture(golden_file)));
  ASSERT_FALSE(golden["cases"].empty());
  int n = 0;
  for (const auto& c : golden["cases"]) {
    SCOPED_TRACE(golden_file + " case " + std::to_string(n++));
    std::string rendered;
    ASSERT_NO_THROW(rendered = tpl.render(request_of(c)));
    EXPECT_EQ(rendered, c["rendered"].get<std::string>());
    EXPECT_EQ(glm().encode(rendered), c["ids"].get<std::vector<int32_t>>());
  }
}

TEST(TextChatTemplate, Glm53GoldenFromModelDir) {
  // The model directory has no chat_template.jinja, so the template comes from tokenizer_config.json.
  const ChatTemplate tpl = ChatTemplate::from_model_dir(fixture("glm-text"));
  check_golden(tpl, "glm-text/chat-golden.json");
}

TEST(TextChatTemplate, Glm46Golden) {
  const ChatTemplate tpl = ChatTemplate::from_file(fixture("templates/glm-chat-template.jinja"),
                                                   fixture("glm-text/tokenizer_config.json"));
  check_golden(tpl, "glm-text/chat-golden-glm46.json");
}

// Public templates other than GLM's, rendered by transformers 5.17 (tools/fixtures/make_template_goldens.py).
TEST(TextChatTemplate, Qwen3Golden) {
  const ChatTemplate tpl = ChatTemplate::from_file(fixture("templates/qwen3-chat-template.jinja"),
                                                   fixture("glm-text/tokenizer_config.json"));
  check_golden(tpl, "chat-templates/chat-golden-qwen3.json");
}

TEST(TextChatTemplate, Llama33Golden) {
  const ChatTemplate tpl = ChatTemplate::from_file(fixture("templates/llama3.3-chat-template.jinja"),
                                                   fixture("glm-text/tokenizer_config.json"));
  check_golden(tpl, "chat-templates/chat-golden-llama3.3.json");
}

TEST(TextChatTemplate, GlmExtraGoldens) {
  check_golden(ChatTemplate::from_file(fixture("templates/glm53-chat-template.jinja"), fixture("glm-text/tokenizer_config.json")),
               "chat-templates/chat-golden-glm53-extra.json");
  check_golden(ChatTemplate::from_file(fixture("templates/glm-chat-template.jinja"), fixture("glm-text/tokenizer_config.json")),
               "chat-templates/chat-golden-glm46-extra.json");
}

TEST(TextChatTemplate, Qwen3RefusesNullContentLikeJinja2) {
  // transformers fails on this conversation too ("argument of type 'NoneType' is not iterable"):
  // the error must be a clear exception, not a crash.
  const ChatTemplate tpl = ChatTemplate::from_file(fixture("templates/qwen3-chat-template.jinja"));
  ChatRequest r;
  r.messages_json = R"([{"role":"user","content":"Q"},{"role":"assistant","content":null}])";
  try {
    tpl.render(r);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NoneType"), std::string::npos) << e.what();
  }
}

TEST(TextChatTemplate, Glm53ThinkingOffAndClearThinking) {
  // Hand-checked against glm-chat-format.md's GLM-5.3 notes: the generation prompt always ends
  // "<|assistant|><think>"; clear_thinking drops reasoning of turns before the last user turn.
  const ChatTemplate tpl = ChatTemplate::from_file(fixture("templates/glm53-chat-template.jinja"));
  ChatRequest r;
  r.messages_json = R"([{"role":"user","content":"Q1"},
      {"role":"assistant","content":"A1","reasoning_content":"R1"},
      {"role":"user","content":"Q2"}])";
  EXPECT_EQ(tpl.render(r),
            "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Q1<|assistant|><think>R1</think>A1"
            "<|user|>Q2<|assistant|><think>");
  r.kwargs_json = R"({"clear_thinking": true})";
  EXPECT_EQ(tpl.render(r),
            "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Q1<|assistant|><think></think>A1"
            "<|user|>Q2<|assistant|><think>");
}

TEST(TextChatTemplate, OpenAiRequestArgumentsStringsAreParsed) {
  const ChatTemplate tpl = ChatTemplate::from_file(fixture("templates/glm53-chat-template.jinja"));
  const std::string req = R"({"model":"glm","reasoning_effort":"high","messages":[
      {"role":"user","content":"Weather?"},
      {"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"days\": 2}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"sunny"}]})";
  EXPECT_EQ(tpl.render_openai_request(req),
            "[gMASK]<sop><|system|>Reasoning Effort: High<|user|>Weather?<|assistant|><think></think>"
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
            "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>"
            "<|observation|><tool_response>sunny</tool_response><|assistant|><think>");
}

TEST(TextChatTemplate, ErrorsNameTheTemplateAndLine) {
  try {
    ChatTemplate bad("line one\n{% if x %}never closed", "bad.jinja");
    FAIL() << "expected a syntax error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.jinja"), std::string::npos) << m;
    EXPECT_NE(m.find("endif"), std::string::npos) << m;
  }
  ChatTemplate raising("{{ raise_exception('only user and assistant roles are supported') }}", "r.jinja");
  try {
    raising.render(ChatRequest{});
    FAIL() << "expected a render error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only user and assistant roles are supported"), std::string::npos);
  }
  EXPECT_THROW(ChatTemplate::from_model_dir("/nonexistent-dir"), Error);
}

}  // namespace
}  // namespace ft::text
