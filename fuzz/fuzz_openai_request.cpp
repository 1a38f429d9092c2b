// Arbitrary bytes as the body of every OpenAI/SGLang request the gateway validates. A bad body
// must end in an ApiError (the 400 the client sees), never a crash, a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gateway/openai_schema.h"

using namespace ft::gateway;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  SchemaLimits lim;
  try { (void)parse_chat_request(body, lim); } catch (const ApiError&) {}
  try { (void)parse_completion_request(body, lim); } catch (const ApiError&) {}
  try { (void)parse_sglang_generate(body, lim); } catch (const ApiError&) {}
  try { (void)parse_tokenize_request(body); } catch (const ApiError&) {}
  try { (void)parse_detokenize_request(body, lim); } catch (const ApiError&) {}
  return 0;
}
