// flashtier-check --model DIR --reference FILE [--internals] [--backend cpu|cuda] [--device N] [--vram-budget-gb G]
//                 [--precision fp32|fp16|auto]
// Checks the reference engine against a fixture made by transformers (see tools/check/fixture_check.h).
#include <cstring>
#include <iostream>
#include <string>

#include "shared/core/error.h"
#include "tools/check/fixture_check.h"

namespace {
int usage() {
  std::cerr << "usage: flashtier-check --model DIR --reference FILE [--internals] [--backend cpu|cuda]\n"
               "                       [--device N] [--vram-budget-gb G] [--precision fp32|fp16|auto]\n"
               "  Runs prefill and cached decode of the fixture cases in FILE (a reference.safetensors)\n"
               "  on the model in DIR and compares logits; exit 0 when every tolerance holds.\n"
               "  cpu (default): the fp32 reference engine, rel L2 <= 1e-4, top-1 and greedy exact.\n"
               "  cuda: the GPU engine, rel L2 <= 3e-3, top-1 >= 0.99, greedy equal except near ties\n"
               "  (the reference's top-2 gap below 0.024 of the row's RMS; counted and reported).\n"
               "  --precision: the cuda engine's precision (default fp32, the references' arithmetic).\n";
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  ft::FixtureCheckOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--model" || a == "--reference") && i + 1 < argc) {
      (a == "--model" ? o.model_dir : o.reference) = argv[++i];
    } else if ((a == "--backend" || a == "--device" || a == "--vram-budget-gb" || a == "--precision") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--backend") o.backend = v;
      else if (a == "--precision") o.precision = v;
      else if (a == "--device") o.device = std::stoi(v);
      else o.vram_budget_gb = std::stod(v);
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
  o.set_backend_tolerances();
  try {
    const ft::FixtureCheckResult r = ft::run_fixture_check(o, std::cout);
    std::cout << r.summary_line() << std::endl;
    return r.passed ? 0 : 1;
  } catch (const ft::Error& e) {
    std::cerr << "flashtier-check: " << e.what() << std::endl;
    return 2;
  }
}
