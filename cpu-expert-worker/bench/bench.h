#pragma once
// flashtier-expert-bench: measurements of the expert tier for docs/perf.md.
#include <string>
#include <vector>

namespace ft::cew::bench {

struct Percentiles {
  double p50 = 0, p99 = 0, mean = 0, max = 0;
  size_t n = 0;
};
Percentiles percentiles(std::vector<double> us);

// shm ring vs gRPC round trips against a forked server process with a no-op engine.
int transport_main(int argc, char** argv);
// Segment build / re-attach and expert compute throughput on a model folder.
int compute_main(int argc, char** argv);
// Writes a model folder holding only routed experts (bf16, random), for compute benchmarks.
int write_dense_main(int argc, char** argv);

}  // namespace ft::cew::bench
