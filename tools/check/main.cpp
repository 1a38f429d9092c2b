// flashtier-check --model DIR --reference FILE [--internals]
// Checks the reference engine against a fixture made by transformers (see tools/check/fixture_check.h).
#include <cstring>
#include <iostream>
#include <string>

#include "shared/core/error.h"
#include "tools/check/fixture_check.h"

namespace {
int usage() {
  std::cerr << "usage: flashtier-check --model DIR --reference FILE [--internals]\n"
               "  Runs prefill and cached decode of the fixture cases in FILE (a reference.safetensors)\n"
               "  on the model in DIR and compares logits; exit 0 when every tolerance holds.\n";
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  ft::FixtureCheckOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--model" || a == "--reference") && i + 1 < argc) {
      (a == "--model" ? o.model_dir : o.reference) = argv[++i];
    } else if (a == "--internals") {
      o.internals = true;
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else {
      std::cerr << "flashtier-check: unknown argument " << a << "\n";
      return usage();
    }
  }
  if (o.model_dir.empty() || o.reference.empty()) return usage();
  try {
    const ft::FixtureCheckResult r = ft::run_fixture_check(o, std::cout);
    std::cout << r.summary_line() << std::endl;
    return r.passed ? 0 : 1;
  } catch (const ft::Error& e) {
    std::cerr << "flashtier-check: " << e.what() << std::endl;
    return 2;
  }
}
