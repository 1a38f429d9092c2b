#include "gpu-worker/service/constraint_request.h"

#include "shared/grammar/constraint.h"

namespace ft::worker {

namespace pb = flashtier::v1;

grpc::Status read_constraints(const pb::GenerateRequest& req, const WorkerCore& core, GenerationParams& p) {
  p.min_tokens = req.min_tokens();
  for (const auto& [id, bias] : req.logit_bias()) p.logit_bias.emplace_back(id, bias);
  std::sort(p.logit_bias.begin(), p.logit_bias.end());
  if (!req.has_constraint() || req.constraint().kind_case() == pb::Constraint::KIND_NOT_SET) return grpc::Status::OK;
  const pb::Constraint& c = req.constraint();
  grammar::ConstraintSource src;
  std::string field = "constraint.";
  switch (c.kind_case()) {
    case pb::Constraint::kJsonSchema:
      src.kind = grammar::ConstraintSource::Kind::JsonSchema;
      src.text = c.json_schema();
      field += "json_schema";
      break;
    case pb::Constraint::kJsonObject:
      if (!c.json_object()) return grpc::Status::OK;
      src.kind = grammar::ConstraintSource::Kind::JsonObject;
      field += "json_object";
      break;
    case pb::Constraint::kRegex:
      src.kind = grammar::ConstraintSource::Kind::Regex;
      src.text = c.regex();
      field += "regex";
      break;
    case pb::Constraint::kEbnf:
      src.kind = grammar::ConstraintSource::Kind::Ebnf;
      src.text = c.ebnf();
      field += "ebnf";
      break;
    case pb::Constraint::kToolCalls:
      src.kind = grammar::ConstraintSource::Kind::ToolCalls;
      src.tools.tools_json = c.tool_calls().tools_json();
      src.tools.function = c.tool_calls().function();
      src.tools.single_call = c.tool_calls().single_call();
      field += "tool_calls";
      break;
    default: return grpc::Status::OK;
  }
  src.after_reasoning = c.after_reasoning();
  const auto vocab = core.vocabulary();
  if (!vocab)
    return {grpc::StatusCode::FAILED_PRECONDITION, field + ": the model folder has no tokenizer.json, which grammar constraints need"};
  try {
    p.grammar = grammar::make_matcher(grammar::compile_constraint(src), vocab);
  } catch (const grammar::GrammarError& e) {
    return {grpc::StatusCode::INVALID_ARGUMENT, field + ": " + e.what()};
  }
  return grpc::Status::OK;
}

}  // namespace ft::worker
