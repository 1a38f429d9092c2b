// The prefix cache of the CPU engine: the index finds the longest kept prefix (verified token by
// token), a restored sequence continues bit-identically to a cold run (prompt in one piece or in
// pieces), snapshots of one conversation share its history, the budget evicts the least recently
// used, long prefills leave stride snapshots, and the scheduler reports cached tokens. The
// bit-identity test runs on every model fixture and on the demo model (made by
// flashtier-demo-model when that tool is built).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <thread>

#include "gpu-worker/engine/scheduler.h"
#include "shared/engine/cpu_engine.h"
#include "shared/engine/prefix_index.h"
#include "tests/support/test_paths.h"

using namespace ft;

namespace {

const ModelWeights& tiny_chat() {
  static const ModelWeights w = load_model(test::fixture("glm5-tiny-chat/model"));
  return w;
}

// Prompt ids in [1, min(501, vocab)).
std::vector<int32_t> tokens(int n, int seed, int64_t vocab = 501) {
  const int64_t m = std::min<int64_t>(500, vocab - 1);
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = static_cast<int32_t>((i * 37 + seed * 101 + 11) % m + 1);
  return p;
}

PrefixIndex::Tokens toks(std::vector<int32_t> v) { return std::make_shared<const std::vector<int32_t>>(std::move(v)); }

// Runs a request on `e`: restore (if asked), prefill the rest in pieces of `piece` tokens
// (0: one piece) with logits of every row, then `gen` greedy decode steps with their logits.
struct RunResult {
  int64_t cached = 0;
  std::vector<float> logits;  // last prefill row, then every decode row
  std::vector<int32_t> out;
};
RunResult run(Engine& e, const std::vector<int32_t>& prompt, int gen, size_t piece, bool restore, bool keep) {
  RunResult r;
  SequenceSpec spec;
  spec.sampling.temperature = 0;
  spec.max_tokens = static_cast<int64_t>(prompt.size()) + gen + 1;
  const uint64_t s = e.open(spec);
  if (restore) r.cached = e.restore_prefix(s, prompt);
  const size_t step = piece ? piece : prompt.size();
  std::vector<StepResult> res;
  const int64_t V = e.config().vocab_size;
  for (size_t at = static_cast<size_t>(r.cached); at < prompt.size(); at += step) {
    const size_t n = std::min(step, prompt.size() - at);
    StepItem it;
    it.seq = s;
    it.tokens = std::span<const int32_t>(prompt).subspan(at, n);
    it.sample = at + n == prompt.size();
    it.logits = LogitsWanted::Last;
    e.step(std::span<const StepItem>(&it, 1), res);
  }
  r.logits.assign(res[0].logits.end() - V, res[0].logits.end());
  r.out.push_back(res[0].token);
  for (int g = 1; g < gen; ++g) {
    StepItem it;
    it.seq = s;
    it.tokens = std::span<const int32_t>(&r.out.back(), 1);
    it.prompt = false;
    it.sample = true;
    it.logits = LogitsWanted::Last;
    e.step(std::span<const StepItem>(&it, 1), res);
    r.logits.insert(r.logits.end(), res[0].logits.begin(), res[0].logits.end());
    r.out.push_back(res[0].token);
  }
  if (keep) e.keep_prefix(s);
  e.close(s);
  return r;
}

}  // namespace

TEST(PrefixIndex, FindsTheLongestVerifiedPrefixAndKeepsLruOrder) {
  PrefixIndex ix(4);
  const auto a = tokens(10, 1);
  std::vector<int32_t> a6(a.begin(), a.begin() + 6), a9(a.begin(), a.begin() + 9);
  ix.insert(toks(a6), nullptr);
  ix.insert(toks(a9), nullptr);
  auto other = a9;
  other[8] = 499;  // same whole blocks, different tail
  ix.insert(toks(other), nullptr);
  const PrefixIndex::Entry* e = ix.find(a, 100);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(*e->tokens, a9);
  EXPECT_EQ(*ix.find(a, 8)->tokens, a6);   // a9 is longer than allowed
  EXPECT_EQ(ix.find(a, 9, 3)->tokens->size(), 9u);  // aligned to 3: 9 qualifies
  EXPECT_EQ(ix.find(a, 9, 4), nullptr);    // neither 6 nor 9 is a multiple of 4
  auto b = a;
  b[2] = 77;  // diverges in the first block: nothing matches
  EXPECT_EQ(ix.find(b, 100), nullptr);
  // LRU: a6 was used last, `other` least recently.
  EXPECT_EQ(*ix.oldest()->tokens, other);
  ix.erase(ix.oldest()->id);
  EXPECT_EQ(ix.size(), 2u);
  ix.insert(toks(a6), nullptr);  // same tokens: replaced, not added
  EXPECT_EQ(ix.size(), 2u);
}

// Turn 1 kept; turn 2 quotes turn 1's prompt and answer and adds a new message; restored runs of
// turn 2 (prompt in one piece, in pieces of 7 and of 64) against a cold engine, bit for bit.
void check_restored_equals_cold(const ModelWeights& w, const std::string& name) {
  SCOPED_TRACE(name);
  const int64_t V = w.cfg.vocab_size;
  PrefixCacheOptions pc;
  pc.bytes = 256 << 20;
  CpuEngine warm(w, nullptr, 4, pc), cold(w, nullptr, 4);
  const auto p1 = tokens(90, 3, V);
  const RunResult t1 = run(warm, p1, 12, 0, true, true);
  EXPECT_EQ(t1.cached, 0);
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), t1.out.begin(), t1.out.end());
  const auto extra = tokens(40, 9, V);
  p2.insert(p2.end(), extra.begin(), extra.end());
  const int64_t turn1 = static_cast<int64_t>(p1.size() + t1.out.size() - 1);  // what turn 1 fed
  for (size_t piece : {size_t{0}, size_t{7}, size_t{64}}) {
    const RunResult hot = run(warm, p2, 10, piece, true, false);
    const RunResult ref = run(cold, p2, 10, piece, false, false);
    // The first run restores turn 1; it leaves a snapshot one token before its own prompt's
    // end, which the repeats then restore.
    EXPECT_EQ(hot.cached, piece == 0 ? turn1 : static_cast<int64_t>(p2.size()) - 1) << "piece " << piece;
    EXPECT_EQ(hot.out, ref.out) << "piece " << piece;
    ASSERT_EQ(hot.logits.size(), ref.logits.size());
    EXPECT_TRUE(std::equal(hot.logits.begin(), hot.logits.end(), ref.logits.begin())) << "piece " << piece;
  }
  const PrefixCacheStats st = warm.prefix_stats();
  EXPECT_EQ(st.hits, 3u);
  EXPECT_EQ(st.tokens_saved, static_cast<uint64_t>(turn1 + 2 * (static_cast<int64_t>(p2.size()) - 1)));
}

TEST(PrefixCache, RestoredRequestsAreBitIdenticalToColdRuns) {
  check_restored_equals_cold(tiny_chat(), "glm5-tiny-chat");
  for (const char* f : {"glm5-tiny-a", "glm5-tiny-exl3", "glm5-variants/glm5-var-allsparse-kpool16",
                        "glm5-variants/glm5-var-fp32-kpool1", "glm5-variants/glm5-var-group-softplus",
                        "glm5-variants/glm5-var-hc2-wide", "glm5-variants/glm5-var-notail",
                        "glm5-variants/glm5-var-shared-indexer", "glm5-variants/glm5-var-tied",
                        "glm5-variants/glm5-var-12layer"})
    check_restored_equals_cold(load_model(test::fixture(std::string(f) + "/model")), f);
}

// The demo model (tools/demo-model: the model the README's first command serves).
TEST(PrefixCache, RestoredRequestsOnTheDemoModelAreBitIdenticalToColdRuns) {
  const std::string tool = std::string(FLASHTIER_BIN_DIR) + "/flashtier-demo-model";
  if (!std::filesystem::exists(tool)) GTEST_SKIP() << "flashtier-demo-model is not built";
  test::TempDir dir;
  const std::string model = dir / "demo-model";
  ASSERT_EQ(std::system(("'" + tool + "' --out '" + model + "' >/dev/null").c_str()), 0);
  check_restored_equals_cold(load_model(model), "demo-model");
}

TEST(PrefixCache, SnapshotsOfOneConversationShareItsHistory) {
  PrefixCacheOptions pc;
  pc.bytes = 256 << 20;
  CpuEngine e(tiny_chat(), nullptr, 2, pc);
  const auto p = tokens(300, 4);
  run(e, std::vector<int32_t>(p.begin(), p.begin() + 200), 1, 0, false, true);
  const uint64_t one = e.prefix_stats().bytes;
  run(e, p, 1, 0, true, true);  // 300 tokens: its first 192 (3 blocks of 64) already held
  const uint64_t two = e.prefix_stats().bytes;
  CpuEngine f(tiny_chat(), nullptr, 2, pc);
  run(f, p, 1, 0, false, true);
  const uint64_t alone = f.prefix_stats().bytes;
  EXPECT_EQ(e.prefix_stats().snapshots, 4u);  // each request: one token before its prompt's end, and its end
  EXPECT_LT(two, one + alone) << "the 300-token snapshot copied the history it shares";
}

TEST(PrefixCache, TheBudgetEvictsTheLeastRecentlyUsed) {
  PrefixCacheOptions pc;
  CpuEngine probe(tiny_chat(), nullptr, 1, PrefixCacheOptions{1 << 30, 0});
  run(probe, tokens(120, 1), 1, 0, false, true);
  pc.bytes = probe.prefix_stats().bytes * 5 / 2;  // room for two such conversations, not three
  CpuEngine e(tiny_chat(), nullptr, 1, pc);
  for (int k = 0; k < 3; ++k) run(e, tokens(120, 10 + k), 1, 0, false, true);
  PrefixCacheStats st = e.prefix_stats();
  EXPECT_GE(st.evictions, 1u);
  EXPECT_GE(st.snapshots, 2u);
  EXPECT_LE(st.bytes, st.budget);
  // The first conversation was evicted: its continuation misses and is still correct.
  auto c0 = tokens(120, 10);
  c0.push_back(5);
  CpuEngine cold(tiny_chat(), nullptr, 1);
  const RunResult miss = run(e, c0, 3, 0, true, false), ref = run(cold, c0, 3, 0, false, false);
  EXPECT_EQ(miss.cached, 0);
  EXPECT_EQ(miss.out, ref.out);
  auto c2 = tokens(120, 12);
  c2.push_back(5);
  EXPECT_GT(run(e, c2, 1, 0, true, false).cached, 0);
}

TEST(PrefixCache, EvictingTheSnapshotASequenceRestoredLeavesItIntact) {
  // Room for about one conversation: B restores A's snapshot, then B's own snapshots evict it
  // while B is still generating; B's tokens equal a cold run's.
  CpuEngine probe(tiny_chat(), nullptr, 1, PrefixCacheOptions{1 << 30, 0});
  run(probe, tokens(150, 2), 1, 0, false, true);
  PrefixCacheOptions pc;
  pc.bytes = probe.prefix_stats().bytes * 3 / 2;
  CpuEngine e(tiny_chat(), nullptr, 2, pc), cold(tiny_chat(), nullptr, 1);
  const auto a = tokens(150, 2);
  run(e, a, 1, 0, false, true);
  auto b = a;
  const auto more = tokens(90, 5);
  b.insert(b.end(), more.begin(), more.end());
  const RunResult hot = run(e, b, 8, 0, true, true), ref = run(cold, b, 8, 0, false, false);
  EXPECT_GT(hot.cached, 0);
  EXPECT_GE(e.prefix_stats().evictions, 1u);
  EXPECT_EQ(hot.out, ref.out);
  EXPECT_TRUE(std::equal(hot.logits.begin(), hot.logits.end(), ref.logits.begin()));
}

TEST(PrefixCache, LongPrefillsLeaveStrideSnapshots) {
  PrefixCacheOptions pc;
  pc.bytes = 256 << 20;
  pc.snapshot_stride = 128;
  CpuEngine e(tiny_chat(), nullptr, 1, pc);
  const auto p = tokens(300, 6);
  run(e, p, 1, 64, false, false);  // never kept at its end: only stride snapshots exist
  auto q = std::vector<int32_t>(p.begin(), p.begin() + 270);
  q.push_back(3);  // shares 270 tokens: the 256-token stride snapshot is the longest
  CpuEngine cold(tiny_chat(), nullptr, 1);
  const RunResult hot = run(e, q, 4, 0, true, false), ref = run(cold, q, 4, 0, false, false);
  EXPECT_EQ(hot.cached, 256);
  EXPECT_EQ(hot.out, ref.out);
  EXPECT_TRUE(std::equal(hot.logits.begin(), hot.logits.end(), ref.logits.begin()));
}

TEST(PrefixCache, TheSchedulerRestoresReportsAndNeverKeepsACancelledPrefill) {
  using namespace ft::worker;
  PrefixCacheOptions pc;
  pc.bytes = 256 << 20;
  CpuEngine e(tiny_chat(), nullptr, 8, pc);
  SchedulerOptions o;
  o.chunk_size = 16;  // prompts arrive over several steps
  Scheduler s(e, o);
  auto collect = [](const std::shared_ptr<RequestStream>& st) {
    std::vector<TokenEvent> ev;
    std::optional<Outcome> done;
    while (!(done = st->wait(ev, std::chrono::milliseconds(2000)))) {
    }
    std::vector<int32_t> t;
    for (auto& x : ev) t.push_back(x.token);
    return std::make_pair(t, *done);
  };
  auto greedy = [](std::vector<int32_t> p, uint32_t n) {
    Request r;
    r.prompt = std::move(p);
    r.params.sampling.temperature = 0;
    r.params.max_new_tokens = n;
    r.params.ignore_eos = true;
    return r;
  };
  const auto base = tokens(100, 8);
  Request a = greedy(base, 6);
  auto sa = a.stream;
  s.submit(std::move(a));
  const auto [ta, oa] = collect(sa);
  EXPECT_EQ(oa.cached_tokens, 0u);
  // Two requests that quote the first one at once: both restore, both equal a cold engine.
  std::vector<int32_t> follow = base;
  follow.insert(follow.end(), ta.begin(), ta.end());
  follow.push_back(42);
  Request b = greedy(follow, 5), c = greedy(follow, 5);
  auto sb = b.stream, sc = c.stream;
  s.submit(std::move(b));
  s.submit(std::move(c));
  const auto [tb, ob] = collect(sb);
  const auto [tc, oc] = collect(sc);
  EXPECT_EQ(ob.cached_tokens, base.size() + ta.size() - 1);
  EXPECT_EQ(oc.cached_tokens, base.size() + ta.size() - 1);
  CpuEngine cold(tiny_chat(), nullptr, 1);
  const RunResult ref = run(cold, follow, 5, 0, false, false);
  EXPECT_EQ(tb, ref.out);
  EXPECT_EQ(tc, ref.out);
  // A request cancelled mid-prefill leaves nothing behind to be served as its prompt.
  const auto fresh = tokens(400, 33);
  Request d = greedy(fresh, 4);
  auto sd = d.stream;
  const uint64_t steps = s.stats().steps;
  s.submit(std::move(d));
  while (s.stats().steps < steps + 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  sd->cancel();  // a few 16-token chunks in: mid-prefill
  while (s.stats().cancelled < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Request again = greedy(fresh, 4);
  auto sg = again.stream;
  s.submit(std::move(again));
  const auto [tg, og] = collect(sg);
  EXPECT_EQ(og.cached_tokens, 0u);
  EXPECT_EQ(tg, run(cold, fresh, 4, 0, false, false).out);
  EXPECT_GE(s.stats().prefix.hits, 2u);
}
