#pragma once
// The front door: a request's constraint (what the gRPC Generate API carries) compiled to a
// Grammar, and the Grammar bound to a vocabulary as a TokenConstraint for the sampler. The gateway
// compiles too (no tokenizer needed) to refuse bad constraints with a 400 before any work.
#include <memory>
#include <string>

#include "shared/grammar/grammar.h"
#include "shared/grammar/tool_calls.h"
#include "shared/grammar/vocabulary.h"
#include "shared/sampling/token_constraint.h"

namespace ft::grammar {

struct ConstraintSource {
  enum class Kind { None, JsonSchema, JsonObject, Regex, Ebnf, ToolCalls } kind = Kind::None;
  std::string text;       // JsonSchema: the schema; Regex: the pattern; Ebnf: the grammar
  ToolCallOptions tools;  // ToolCalls
  // The output starts inside reasoning (GLM's generation prompt ends "<think>"): free text up to
  // the </think> token comes first, the constraint applies after it.
  bool after_reasoning = false;
};

// Throws GrammarError. The grammar's root matches the whole output.
Grammar compile_constraint(const ConstraintSource& s);

// The grammar's matcher over `vocab` (throws GrammarError when the grammar names an added token
// the vocabulary lacks, or when it can never finish: no EOS reachable).
std::unique_ptr<TokenMatcher> make_matcher(const Grammar& g, std::shared_ptr<const Vocabulary> vocab);

}  // namespace ft::grammar
