#pragma once
// A byte-level vocabulary of a given size shaped like a BPE vocabulary (all 256 bytes; words with
// and without a leading space; digits, punctuation and JSON-ish runs; CJK pieces, some ending
// inside a character) plus GLM's added tokens, for timing masks where no real tokenizer of that
// size is at hand. Deterministic for a seed.
#include <cstdint>
#include <memory>

#include "shared/grammar/vocabulary.h"

namespace ft::grammar {

std::shared_ptr<const Vocabulary> synthetic_vocab(size_t size, uint64_t seed);

}  // namespace ft::grammar
