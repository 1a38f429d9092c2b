// Arbitrary model output through the GLM reasoning/tool-call parser, fed whole and in chunks cut
// at places taken from the input: no crash, and the streamed deltas add up to the one-shot parse
// (a call's arguments: its final arguments; the fragments carry more only when a key repeats).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "shared/text/glm_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t step = 1 + data[0] % 16;  // chunk size of the streamed run
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  ft::text::GlmParseOptions opts;
  const ft::text::GlmMessage whole = ft::text::parse_glm_output(text, opts);
  ft::text::GlmStreamParser stream(opts);
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments by index
  auto take = [&](const ft::text::GlmDelta& d) {
    reasoning += d.reasoning_content;
    content += d.content;
    for (const auto& c : d.tool_calls) {
      if (c.index < 0 || c.index > 1000) std::abort();
      if (calls.size() <= size_t(c.index)) calls.resize(size_t(c.index) + 1);
      calls[size_t(c.index)].first += c.name;
      calls[size_t(c.index)].second += c.arguments;
    }
  };
  for (size_t at = 0; at < text.size(); at += step) take(stream.feed(text.substr(at, step)));
  take(stream.finish());
  if (reasoning != whole.reasoning_content.value_or("") || content != whole.content.value_or("")) std::abort();
  if (calls.size() != whole.tool_calls.size()) std::abort();
  // Streamed argument fragments are never taken back, so a call that repeats a key streams both
  // pairs while the one-shot parse keeps one (glm_parser.h); the stream's final arguments must
  // equal the one-shot ones, and the fragments must too whenever no key repeats.
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string final_args = stream.final_arguments(static_cast<int>(i));
    if (calls[i].first != whole.tool_calls[i].name || final_args != whole.tool_calls[i].arguments) std::abort();
    if (calls[i].second != final_args && calls[i].second.size() <= final_args.size()) std::abort();
  }
  return 0;
}
