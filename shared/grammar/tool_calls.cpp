#include "shared/grammar/tool_calls.h"

#include <nlohmann/json.hpp>

#include "shared/grammar/json_schema.h"

namespace ft::grammar {

int32_t tool_calls_rule(Grammar& g, const ToolCallOptions& o) {
  using json = nlohmann::ordered_json;
  json tools;
  try {
    tools = json::parse(o.tools_json);
  } catch (const json::parse_error& e) {
    throw GrammarError(std::string("tools are not valid JSON: ") + e.what());
  }
  if (!tools.is_array() || tools.empty()) throw GrammarError("tools must be a non-empty array");
  std::vector<int32_t> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string path = "tools[" + std::to_string(i) + "].function";
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object() || !t["function"].contains("name") ||
        !t["function"]["name"].is_string())
      throw GrammarError("tools[" + std::to_string(i) + "] must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    const json& f = t["function"];
    const std::string name = f["name"].get<std::string>();
    if (!o.function.empty() && name != o.function) continue;
    const json params = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : json::object();
    const int32_t args = tag_arguments_expr(
        g, params.dump(),
        [&](const std::string& key, int32_t value) {
          return g.seq({g.token("<arg_key>"), g.literal(key), g.token("</arg_key>"), g.byte('\n'), g.token("<arg_value>"),
                        value, g.token("</arg_value>"), g.byte('\n')});
        },
        path + ".parameters");
    const int32_t r = g.add_rule("call-" + name);
    g.define(r, g.seq({g.token("<tool_call>"), g.literal(name), g.byte('\n'), args, g.token("</tool_call>")}));
    calls.push_back(g.ref(r));
  }
  if (calls.empty()) throw GrammarError("no tool is named '" + o.function + "'");
  const int32_t one = g.seq({g.opt(g.byte('\n')), g.alt(calls)});
  const int32_t root = g.add_rule("tool-calls");
  g.define(root, o.single_call ? one : g.plus(one));
  return root;
}

}  // namespace ft::grammar
