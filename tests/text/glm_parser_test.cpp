#include "shared/text/glm_parser.h"

#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "shared/text/detokenizer.h"
#include "shared/text/tokenizer.h"
#include "shared/text/utf8.h"
#include "tests/text/test_util.h"

namespace ft::text {
namespace {

// The two tools of glm-chat-format.md §9 example 3.
constexpr const char* kTools = R"([
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
      "city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}},
  {"type":"function","function":{"name":"convert_units","parameters":{"type":"object","properties":{
      "value":{"type":"number"},"from":{"type":"string"},"to":{"type":"string"},"round":{"type":"boolean"}}}}},
  {"type":"function","function":{"name":"write_file","parameters":{"type":"object","properties":{
      "path":{"type":"string"},"text":{"type":"string"},"meta":{"type":"object"}}}}},
  {"type":"function","function":{"name":"now","parameters":{"type":"object","properties":{}}}}
])";

// Raw generated text of §9 example 3, GLM-4.6 form (the prompt ended "<|assistant|>").
constexpr const char* kGlm46 =
    "\n<think>The user wants Paris weather for 2 days and 30 C in Fahrenheit. Two independent calls.</think>\n"
    "Let me look that up.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>\n<tool_call>convert_units\n"
    "<arg_key>value</arg_key>\n<arg_value>30</arg_value>\n<arg_key>from</arg_key>\n<arg_value>C</arg_value>\n"
    "<arg_key>to</arg_key>\n<arg_value>F</arg_value>\n<arg_key>round</arg_key>\n<arg_value>true</arg_value>\n"
    "</tool_call>";
// The same turn from GLM-4.7/5.3: output starts inside the reasoning (prompt ended "<think>").
constexpr const char* kGlm47 =
    "The user wants Paris weather for 2 days and 30 C in Fahrenheit. Two independent calls.</think>Let me look "
    "that up.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
    "<arg_value>2</arg_value></tool_call><tool_call>convert_units<arg_key>value</arg_key><arg_value>30</arg_value>"
    "<arg_key>from</arg_key><arg_value>C</arg_value><arg_key>to</arg_key><arg_value>F</arg_value>"
    "<arg_key>round</arg_key><arg_value>true</arg_value></tool_call>";

GlmParseOptions options(bool starts_in_reasoning, bool tools = true) {
  GlmParseOptions o;
  o.starts_in_reasoning = starts_in_reasoning;
  o.parse_tool_calls = tools;
  o.schemas = ToolSchemas::from_openai_tools_json(kTools);
  auto n = std::make_shared<int>(0);
  o.make_call_id = [n] { return "call_" + std::to_string((*n)++); };
  return o;
}

void expect_example3(const GlmMessage& m) {
  EXPECT_EQ(m.reasoning_content, "The user wants Paris weather for 2 days and 30 C in Fahrenheit. Two independent calls.");
  EXPECT_EQ(m.content, "Let me look that up.");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].id, "call_0");
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city": "Paris", "days": 2})");
  EXPECT_EQ(m.tool_calls[1].id, "call_1");
  EXPECT_EQ(m.tool_calls[1].name, "convert_units");
  EXPECT_EQ(m.tool_calls[1].arguments, R"({"value": 30, "from": "C", "to": "F", "round": true})");
}

TEST(TextGlmParser, SpecExample3Glm46Form) { expect_example3(parse_glm_output(kGlm46, options(false))); }
TEST(TextGlmParser, SpecExample3Glm47Form) { expect_example3(parse_glm_output(kGlm47, options(true))); }

TEST(TextGlmParser, ReasoningOnlyWhenNoThinkEnd) {
  // max_tokens hit while thinking: everything is reasoning, no content.
  const auto m = parse_glm_output("still thinking about <tool_call>x", options(true));
  EXPECT_EQ(m.reasoning_content, "still thinking about <tool_call>x");
  EXPECT_FALSE(m.content.has_value());
  EXPECT_TRUE(m.tool_calls.empty());
}

TEST(TextGlmParser, ThinkingDisabledIsAllContent) {
  const auto m = parse_glm_output("  Hello there.\n", options(false));
  EXPECT_FALSE(m.reasoning_content.has_value());
  EXPECT_EQ(m.content, "Hello there.");
}

TEST(TextGlmParser, WithoutToolsToolTagsAreContent) {
  const auto m = parse_glm_output("r</think>a <tool_call>b</tool_call>", options(true, false));
  EXPECT_EQ(m.reasoning_content, "r");
  EXPECT_EQ(m.content, "a <tool_call>b</tool_call>");
}

TEST(TextGlmParser, ZeroArgumentCallsAndTyping) {
  const auto m = parse_glm_output(
      "</think><tool_call>now</tool_call><tool_call>write_file<arg_key>path</arg_key><arg_value>a \"b\".txt</arg_value>"
      "<arg_key>text</arg_key><arg_value>\nline1\n\tline2 ü\n</arg_value><arg_key>meta</arg_key>"
      "<arg_value>{\"k\":[1,2.50,null]}</arg_value><arg_key>extra</arg_key><arg_value>True</arg_value>"
      "<arg_key>raw</arg_key><arg_value>not json</arg_value><arg_key>num</arg_key><arg_value>007</arg_value></tool_call>",
      options(true));
  EXPECT_FALSE(m.reasoning_content.has_value());
  EXPECT_FALSE(m.content.has_value());
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].name, "now");
  EXPECT_EQ(m.tool_calls[0].arguments, "{}");
  EXPECT_EQ(m.tool_calls[1].name, "write_file");
  // String parameters stay strings (escaped, outer whitespace stripped); others are JSON when
  // they parse ("007" does not: JSON has no leading zeros), else raw strings.
  EXPECT_EQ(m.tool_calls[1].arguments,
            "{\"path\": \"a \\\"b\\\".txt\", \"text\": \"line1\\n\\tline2 ü\", \"meta\": {\"k\": [1, 2.5, null]}, "
            "\"extra\": true, \"raw\": \"not json\", \"num\": \"007\"}");
}

TEST(TextGlmParser, StringTypedNumberStaysString) {
  const auto m = parse_glm_output("</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>123</arg_value>"
                                  "<arg_key>days</arg_key><arg_value>123</arg_value></tool_call>",
                                  options(true));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city": "123", "days": 123})");
}

TEST(TextGlmParser, UnfinishedCallStillYieldsAJsonObject) {
  const auto m = parse_glm_output("</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Par", options(true));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city": "Par"})");
}

// Outputs whose every split must parse the same: the spec examples plus edge cases.
std::vector<std::pair<std::string, bool>> fuzz_corpus() {
  return {
      {kGlm46, false},
      {kGlm47, true},
      {"Short answer.</think>\n\nThe answer is <b>42</b> \xF0\x9F\x99\x82 < 3 <tool_ <arg_key>x", true},
      {"r\xC3\xA9sum\xC3\xA9 \xE4\xB8\xAD</think>\xE6\x96\x87<tool_call>write_file<arg_key>text</arg_key><arg_value> <tool_call> "
       "\xF0\x9F\x9A\x80\n</arg_value><arg_key>meta</arg_key><arg_value>[1, {\"a\": \"\xC3\xBC\"}]</arg_value></tool_call>",
       true},
      {"<think>x</think>y<tool_call>now</tool_call>\n<tool_call>now\n</tool_call>trailing text", false},
      {"</think><tool_call>get_weather\n<arg_key>city</arg_key>\\n<arg_value>Paris</arg_value>\\n</tool_call>", true},
      {"plain content with < and </ and <think but no tags", false},
  };
}

// The ordered events of a delta carry exactly its reasoning, content and tool-call fields.
void expect_events_match_fields(const GlmDelta& d) {
  GlmMessage from_events, from_fields;
  append_delta(from_fields, d);
  for (const GlmEvent& e : d.events) {
    GlmDelta one;
    if (e.kind == GlmEvent::Kind::Reasoning) one.reasoning_content = e.text;
    if (e.kind == GlmEvent::Kind::Content) one.content = e.text;
    if (e.kind == GlmEvent::Kind::ToolCall) one.tool_calls.push_back(e.call);
    append_delta(from_events, one);
  }
  EXPECT_EQ(from_events.reasoning_content, from_fields.reasoning_content);
  EXPECT_EQ(from_events.content, from_fields.content);
  ASSERT_EQ(from_events.tool_calls.size(), from_fields.tool_calls.size());
  for (size_t i = 0; i < from_fields.tool_calls.size(); ++i) {
    EXPECT_EQ(from_events.tool_calls[i].id, from_fields.tool_calls[i].id);
    EXPECT_EQ(from_events.tool_calls[i].name, from_fields.tool_calls[i].name);
    EXPECT_EQ(from_events.tool_calls[i].arguments, from_fields.tool_calls[i].arguments);
  }
}

void check_stream_equals_oneshot(const std::string& text, bool in_reasoning, const std::vector<size_t>& cuts) {
  const GlmMessage want = parse_glm_output(text, options(in_reasoning));
  GlmStreamParser p(options(in_reasoning));
  GlmMessage got;
  size_t prev = 0;
  auto check_delta = [&](const GlmDelta& d) {
    for (const std::string* s : {&d.reasoning_content, &d.content}) {
      // Never a partial UTF-8 sequence, never a piece of a tag.
      EXPECT_EQ(utf8_lossy(*s), *s);
      EXPECT_EQ(utf8_incomplete_tail(*s), 0u);
    }
    EXPECT_EQ(d.content.find("<tool_call"), std::string::npos) << d.content;
    EXPECT_EQ(d.content.find("</think"), std::string::npos) << d.content;
    for (const auto& t : d.tool_calls) EXPECT_EQ(utf8_lossy(t.arguments), t.arguments);
    expect_events_match_fields(d);
    append_delta(got, d);
  };
  for (size_t c : cuts) {
    check_delta(p.feed(std::string_view(text).substr(prev, c - prev)));
    prev = c;
  }
  check_delta(p.feed(std::string_view(text).substr(prev)));
  check_delta(p.finish());
  EXPECT_EQ(got.reasoning_content, want.reasoning_content);
  EXPECT_EQ(got.content, want.content);
  ASSERT_EQ(got.tool_calls.size(), want.tool_calls.size());
  for (size_t i = 0; i < want.tool_calls.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].name, want.tool_calls[i].name);
    EXPECT_EQ(got.tool_calls[i].arguments, want.tool_calls[i].arguments);
    EXPECT_FALSE(got.tool_calls[i].id.empty());
  }
}

TEST(TextGlmParser, FuzzEverySingleSplitPoint) {
  for (const auto& [text, in_reasoning] : fuzz_corpus())
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      SCOPED_TRACE(text.substr(0, 30) + " cut " + std::to_string(cut));
      check_stream_equals_oneshot(text, in_reasoning, {cut});
      if (::testing::Test::HasFailure()) return;
    }
}

TEST(TextGlmParser, FuzzByteAtATimeAndRandomSplits) {
  std::mt19937 rng(7);
  for (const auto& [text, in_reasoning] : fuzz_corpus()) {
    std::vector<size_t> every;
    for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
    check_stream_equals_oneshot(text, in_reasoning, every);
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<size_t> cuts;
      for (size_t i = 1; i < text.size(); ++i)
        if (rng() % 5 == 0) cuts.push_back(i);
      check_stream_equals_oneshot(text, in_reasoning, cuts);
    }
  }
}

TEST(TextGlmParser, StreamingDeltaOrderMatchesOpenAi) {
  // Name (with id) comes before any argument text, arguments arrive in order, '}' last.
  GlmStreamParser p(options(true));
  std::vector<GlmDelta> deltas;
  for (char c : std::string(kGlm47)) deltas.push_back(p.feed(std::string(1, c)));
  deltas.push_back(p.finish());
  std::string args0;
  bool saw_name = false;
  for (const auto& d : deltas)
    for (const auto& t : d.tool_calls)
      if (t.index == 0) {
        if (!t.name.empty()) {
          EXPECT_FALSE(saw_name);
          EXPECT_TRUE(args0.empty());
          EXPECT_EQ(t.name, "get_weather");
          EXPECT_EQ(t.id, "call_0");
          saw_name = true;
        }
        args0 += t.arguments;
      }
  EXPECT_TRUE(saw_name);
  EXPECT_EQ(args0, R"({"city": "Paris", "days": 2})");
}

TEST(TextGlmParser, TextBetweenAndAfterCallsIsContent) {
  // GLM-4.7/5.3 form: no separators; text between and after the calls is kept, in order.
  auto m = parse_glm_output("r</think>First.<tool_call>now</tool_call> Then this.<tool_call>now</tool_call>Done.",
                            options(true));
  EXPECT_EQ(m.reasoning_content, "r");
  EXPECT_EQ(m.content, "First. Then this.Done.");
  EXPECT_EQ(m.tool_calls.size(), 2u);
  // GLM-4.6 form: the newlines around calls are separators; only the stream's outer whitespace
  // is stripped, so a newline that sits between two pieces of text stays.
  m = parse_glm_output("\n<think>r</think>\nLook.\n<tool_call>now\n</tool_call>\n<tool_call>now\n</tool_call>\nAfter.\n",
                       options(false));
  EXPECT_EQ(m.content, "Look.\n\n\nAfter.");
  EXPECT_EQ(m.tool_calls.size(), 2u);
  // Only whitespace after the last call: no content at all.
  m = parse_glm_output("</think><tool_call>now</tool_call>\n  ", options(true));
  EXPECT_FALSE(m.content.has_value());
}

TEST(TextGlmParser, EventsKeepTheOrderWithinOneDelta) {
  GlmStreamParser p(options(true));
  GlmDelta d = p.feed("why</think>Let me.<tool_call>now</tool_call>Done.");
  ASSERT_EQ(d.events.size(), 4u);
  EXPECT_EQ(d.events[0].kind, GlmEvent::Kind::Reasoning);
  EXPECT_EQ(d.events[0].text, "why");
  EXPECT_EQ(d.events[1].kind, GlmEvent::Kind::Content);
  EXPECT_EQ(d.events[1].text, "Let me.");
  EXPECT_EQ(d.events[2].kind, GlmEvent::Kind::ToolCall);
  EXPECT_EQ(d.events[2].call.name, "now");
  EXPECT_EQ(d.events[2].call.id, "call_0");
  EXPECT_EQ(d.events[2].call.arguments, "{}");
  EXPECT_EQ(d.events[3].kind, GlmEvent::Kind::Content);
  EXPECT_EQ(d.events[3].text, "Done.");
  expect_events_match_fields(d);
}

constexpr const char* kRepeated =
    "</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
    "<arg_value>2</arg_value><arg_key>city</arg_key><arg_value>Lyon</arg_value></tool_call>";

TEST(TextGlmParser, RepeatedKeyLastWins) {
  const auto m = parse_glm_output(kRepeated, options(true));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  // One key, first position, last value (Python dict semantics).
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city": "Lyon", "days": 2})");
  // The stream cannot take back "Paris": it carries both pairs, and a JSON parser reading the
  // concatenation (last-wins) gets the same object as the final arguments.
  GlmStreamParser p(options(true));
  GlmMessage streamed;
  for (char c : std::string(kRepeated)) append_delta(streamed, p.feed(std::string(1, c)));
  append_delta(streamed, p.finish());
  ASSERT_EQ(streamed.tool_calls.size(), 1u);
  EXPECT_EQ(streamed.tool_calls[0].arguments, R"({"city": "Paris", "days": 2, "city": "Lyon"})");
  EXPECT_EQ(nlohmann::json::parse(streamed.tool_calls[0].arguments), nlohmann::json::parse(m.tool_calls[0].arguments));
  EXPECT_EQ(p.final_arguments(0), m.tool_calls[0].arguments);
  EXPECT_TRUE(p.error().empty());
}

TEST(TextGlmParser, RepeatedKeyIsAnErrorForAStrictTool) {
  GlmParseOptions o = options(true);
  o.schemas = ToolSchemas::from_openai_tools_json(
      R"([{"type":"function","function":{"name":"get_weather","strict":true,"parameters":{"type":"object",
          "properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}])");
  EXPECT_TRUE(o.schemas.is_strict("get_weather"));
  GlmStreamParser p(o);
  p.feed("</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
         "<arg_value>2</arg_value>");
  EXPECT_TRUE(p.error().empty());  // distinct keys are fine
  p.feed("<arg_key>city</arg_key><arg_value>Lyon");
  EXPECT_EQ(p.error(), "tool call 0 ('get_weather') repeats argument 'city'; the tool is strict");
  // A tool without "strict": true in the same request keeps last-wins.
  GlmStreamParser q(options(true));
  q.feed(kRepeated);
  EXPECT_TRUE(q.error().empty());
}

TEST(TextGlmParser, StringArgumentsStreamAsTheyArrive) {
  // A long string value is not held until </arg_value>: every character that cannot start the
  // closing tag goes out at once (the fix for vLLM issue #32829 is the same idea).
  GlmStreamParser p(options(true));
  std::string args;
  for (const auto& t : p.feed("</think><tool_call>write_file<arg_key>text</arg_key><arg_value>").tool_calls) args += t.arguments;
  const std::string body = "a long file body, line after line";
  for (char c : body) {
    GlmDelta d = p.feed(std::string(1, c));
    for (const auto& t : d.tool_calls) args += t.arguments;
    // (A space waits for the next character: string values lose their outer whitespace.)
    if (c != ' ') EXPECT_TRUE(args.ends_with(std::string(1, c))) << "held back: " << c;
  }
  EXPECT_EQ(args, "{\"text\": \"" + body);
  GlmDelta d = p.feed("<");  // could be </arg_value>: held
  EXPECT_TRUE(d.tool_calls.empty());
  d = p.feed("/arg_value></tool_call>");
  for (const auto& t : d.tool_calls) args += t.arguments;
  EXPECT_EQ(args, "{\"text\": \"" + body + "\"}");
}

TEST(TextGlmParser, TokenStreamThroughDetokenizer) {
  // Whole path of a streamed reply: token ids -> detokenizer deltas -> parser deltas.
  const Tokenizer tok = Tokenizer::from_file(testing::fixture("glm-text/tokenizer.json"));
  const std::string text = kGlm47;
  const auto ids = tok.encode(text);
  IncrementalDetokenizer detok(tok);
  GlmStreamParser p(options(true));
  GlmMessage got;
  for (int32_t id : ids) append_delta(got, p.feed(detok.push(id)));
  append_delta(got, p.feed(detok.finish()));
  append_delta(got, p.finish());
  expect_example3(got);
}

}  // namespace
}  // namespace ft::text
