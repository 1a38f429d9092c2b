// flashtier-expert-bench transport | compute | write-dense-model  (see --help of each)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "cpu-expert-worker/bench/bench.h"

namespace ft::cew::bench {

Percentiles percentiles(std::vector<double> us) {
  Percentiles p;
  p.n = us.size();
  if (us.empty()) return p;
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))]; };
  p.p50 = at(0.50);
  p.p99 = at(0.99);
  p.max = us.back();
  for (double v : us) p.mean += v;
  p.mean /= static_cast<double>(us.size());
  return p;
}

}  // namespace ft::cew::bench

int main(int argc, char** argv) {
  using namespace ft::cew::bench;
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "transport") return transport_main(argc - 1, argv + 1);
  if (cmd == "compute") return compute_main(argc - 1, argv + 1);
  if (cmd == "write-dense-model") return write_dense_main(argc - 1, argv + 1);
  std::fprintf(stderr,
               "usage: flashtier-expert-bench transport [--iters N] [--hidden D] [--tokens N]\n"
               "       flashtier-expert-bench compute --model DIR [--segment NAME] [--threads N] [--iters N]\n"
               "                                      [--tokens 1,8,32] [--keep]\n"
               "       flashtier-expert-bench write-dense-model --out DIR [--hidden D] [--inter I] [--experts E]\n"
               "                                      [--layers L] [--top-k K]\n");
  return 2;
}
