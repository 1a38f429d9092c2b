#pragma once
// A Grammar compiled to a byte-level pushdown automaton: every rule becomes a small NFA over
// bytes and added tokens (Thompson construction); a reference to a rule is a call edge that pushes
// the node to return to. The matcher (matcher.h) runs it as sets of (node, stack) configurations.
//
// Compilation refuses grammars the matcher could not run: undefined rules, left recursion (a
// rule that can reach itself before consuming input would push forever) and automata beyond
// kMaxNodes. Immutable after compilation, so one automaton serves any number of matchers.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/grammar/grammar.h"

namespace ft::grammar {

constexpr size_t kMaxNodes = 2'000'000;

struct PdaEdge {
  enum Kind : uint8_t { Byte, Token, Epsilon, Call } kind = Epsilon;
  int32_t target = -1;  // the next node (Call: the node to return to)
  int32_t arg = -1;     // Byte: index into Pda::byte_sets; Token: grammar token; Call: the callee machine
};

struct PdaNode {
  std::vector<PdaEdge> edges;
  int32_t machine = -1;   // the machine (rule or repeated body) the node belongs to
  bool consumes = false;  // has a Byte or Token edge
};

class Pda {
 public:
  // Throws GrammarError for undefined rules, left recursion, or an automaton too large.
  static std::shared_ptr<const Pda> compile(const Grammar& g);

  struct Machine {
    int32_t start = -1, end = -1;
    std::string name;  // the rule's name, or "<rule>/repeat" for a repeated body
  };

  const std::vector<PdaNode>& nodes() const { return nodes_; }
  const std::vector<Machine>& machines() const { return machines_; }
  const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
  const std::vector<std::string>& tokens() const { return tokens_; }  // added tokens by content
  int32_t root() const { return root_; }  // machine of the root rule
  bool is_end(int32_t node) const { return nodes_[size_t(node)].machine >= 0 && machines_[size_t(nodes_[size_t(node)].machine)].end == node; }

 private:
  friend class PdaBuilder;
  std::vector<PdaNode> nodes_;
  std::vector<Machine> machines_;
  std::vector<ByteSet> byte_sets_;
  std::vector<std::string> tokens_;
  int32_t root_ = -1;
};

}  // namespace ft::grammar
