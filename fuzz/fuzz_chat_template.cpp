// Arbitrary chat requests (messages, tools, kwargs as JSON) rendered with GLM-5.3-Flash's chat
// template (the tiny-chat fixture's copy). A request the template cannot render must end in
// ft::Error (the gateway's 400), never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "shared/core/error.h"
#include "shared/text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ft::text::ChatTemplate tmpl =
      ft::text::ChatTemplate::from_model_dir(FLASHTIER_SOURCE_DIR "/tests/fixtures/glm5-tiny-chat/model");
  try {
    (void)tmpl.render_openai_request(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const ft::Error&) {
  }
  return 0;
}
