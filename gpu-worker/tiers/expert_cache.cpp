#include "gpu-worker/tiers/expert_cache.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

#include "shared/core/error.h"

namespace ft::tiers {

ExpertCache::ExpertCache(int layers, int experts, int slots)
    : layers_(layers), experts_(experts), where_(static_cast<size_t>(layers) * experts, -1),
      slot_owner_(static_cast<size_t>(std::max(slots, 0)), {-1, -1}), ref_(slot_owner_.size(), 0),
      pinned_at_(slot_owner_.size(), 0), usable_(static_cast<int>(slot_owner_.size())),
      counters_(static_cast<size_t>(layers)) {}

void ExpertCache::begin_step(bool admit) {
  ++step_;  // pins are "pinned_at_ == step_": ending a step unpins everything at once
  if (step_ == 0) {  // wrapped: clear stale pins
    std::fill(pinned_at_.begin(), pinned_at_.end(), 0);
    step_ = 1;
  }
  admit_ = admit;
}

std::optional<int> ExpertCache::lookup(int layer, int expert) {
  const int s = where_[key(layer, expert)];
  if (s < 0) {
    ++counters_[layer].misses;
    return std::nullopt;
  }
  ++counters_[layer].hits;
  ref_[s] = 1;
  pinned_at_[s] = step_;
  return s;
}

std::optional<int> ExpertCache::admit(int layer, int expert, std::pair<int, int>* evicted) {
  if (evicted) *evicted = {-1, -1};
  if (!admit_ || slot_owner_.empty()) return std::nullopt;
  if (const int s = where_[key(layer, expert)]; s >= 0) {  // already present (admitted earlier this step)
    pinned_at_[s] = step_;
    return s;
  }
  // CLOCK: sweep at most twice (first pass clears reference bits), skipping pinned slots.
  const int n = usable_;
  if (n == 0) return std::nullopt;
  for (int tries = 0; tries < 2 * n; ++tries) {
    if (hand_ >= n) hand_ = 0;
    const int s = hand_;
    hand_ = (hand_ + 1) % n;
    if (pinned_at_[s] == step_) continue;
    if (slot_owner_[s].first >= 0 && ref_[s]) {
      ref_[s] = 0;
      continue;
    }
    if (slot_owner_[s].first >= 0) {
      if (evicted) *evicted = slot_owner_[s];
      where_[key(slot_owner_[s].first, slot_owner_[s].second)] = -1;
      ++counters_[slot_owner_[s].first].evictions;
    }
    slot_owner_[s] = {layer, expert};
    where_[key(layer, expert)] = s;
    ref_[s] = 1;
    pinned_at_[s] = step_;
    ++counters_[layer].admissions;
    return s;
  }
  return std::nullopt;  // every slot pinned by this step
}

void ExpertCache::end_step() { ++step_; }

std::vector<Admission> admit_step(ExpertCache& cache, const std::vector<std::vector<int32_t>>& used, int budget,
                                  int* first_layer) {
  const int layers = static_cast<int>(used.size());
  std::vector<std::vector<int32_t>> misses(static_cast<size_t>(layers));
  for (int l = 0; l < layers; ++l)
    for (int32_t e : used[static_cast<size_t>(l)])
      if (e >= 0 && e < cache.experts() && !cache.lookup(l, e)) misses[static_cast<size_t>(l)].push_back(e);
  std::vector<Admission> out;
  if (layers == 0) return out;
  int l = ((*first_layer % layers) + layers) % layers;
  std::vector<size_t> next(static_cast<size_t>(layers), 0);
  int idle = 0;  // layers in a row with nothing left to admit
  while (budget > 0 && idle < layers) {
    std::vector<int32_t>& m = misses[static_cast<size_t>(l)];
    size_t& i = next[static_cast<size_t>(l)];
    if (i < m.size()) {
      Admission a;
      a.layer = l;
      a.expert = m[i++];
      const std::optional<int> slot = cache.admit(l, a.expert, &a.evicted);
      if (!slot) {  // admission off, or every slot pinned: nothing more this step
        *first_layer = l;
        return out;
      }
      a.slot = *slot;
      out.push_back(a);
      --budget;
      idle = 0;
      *first_layer = (l + 1) % layers;
    } else {
      ++idle;
    }
    l = (l + 1) % layers;
  }
  return out;
}

std::vector<std::pair<int, std::pair<int, int>>> ExpertCache::warm_start(
    const std::vector<std::vector<uint64_t>>& counts) {
  std::vector<std::pair<uint64_t, int>> order;  // (count, key), most used first, ties to lower key
  for (int l = 0; l < layers_ && l < static_cast<int>(counts.size()); ++l)
    for (int e = 0; e < experts_ && e < static_cast<int>(counts[l].size()); ++e)
      if (counts[l][e] > 0) order.emplace_back(counts[l][e], key(l, e));
  std::sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::vector<std::pair<int, std::pair<int, int>>> out;
  int s = 0;
  for (const auto& [cnt, k] : order) {
    while (s < usable_ && slot_owner_[s].first >= 0) ++s;
    if (s >= usable_) break;
    if (where_[k] >= 0) continue;
    const int l = k / experts_, e = k % experts_;
    slot_owner_[s] = {l, e};
    where_[k] = s;
    out.push_back({s, {l, e}});
  }
  return out;
}

std::vector<std::pair<int, int>> ExpertCache::lend(int n) {
  std::vector<std::pair<int, int>> out;
  if (lent() > 0) return out;
  n = std::clamp(n, 0, slots());
  usable_ = slots() - n;
  for (int s = usable_; s < slots(); ++s) {
    const auto o = slot_owner_[s];
    if (o.first < 0) continue;
    where_[key(o.first, o.second)] = -1;
    slot_owner_[s] = {-1, -1};
    ref_[s] = 0;
    out.push_back(o);
  }
  lent_owners_ = out;
  return out;
}

std::vector<std::pair<int, int>> ExpertCache::give_back() {
  usable_ = slots();
  std::vector<std::pair<int, int>> out;
  for (const auto& o : lent_owners_)
    if (where_[key(o.first, o.second)] < 0) out.push_back(o);
  lent_owners_.clear();
  return out;
}

bool ExpertCache::restore(int slot, int layer, int expert) {
  if (slot < 0 || slot >= usable_ || slot_owner_[slot].first >= 0 || where_[key(layer, expert)] >= 0) return false;
  slot_owner_[slot] = {layer, expert};
  where_[key(layer, expert)] = slot;
  ref_[slot] = 1;
  return true;
}

std::optional<int> ExpertCache::slot_of(int layer, int expert) const {
  const int s = where_[key(layer, expert)];
  return s < 0 ? std::nullopt : std::optional<int>(s);
}

CacheCounters ExpertCache::totals() const {
  CacheCounters t;
  for (const auto& c : counters_) {
    t.hits += c.hits;
    t.misses += c.misses;
    t.admissions += c.admissions;
    t.evictions += c.evictions;
  }
  return t;
}

std::vector<std::vector<uint64_t>> read_routing_stats(const std::string& path, int layers, int experts) {
  std::ifstream f(path);
  if (!f) throw Error(path + ": cannot open the routing-statistics file");
  std::vector<std::vector<uint64_t>> c(static_cast<size_t>(layers), std::vector<uint64_t>(static_cast<size_t>(experts), 0));
  std::string line;
  int lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    int l = -1;
    if (!(ss >> l) || l < 0 || l >= layers)
      throw Error(path + ":" + std::to_string(lineno) + ": the line must start with a MoE layer index in [0, " +
                  std::to_string(layers) + ")");
    for (int e = 0; e < experts; ++e)
      if (!(ss >> c[l][e]))
        throw Error(path + ":" + std::to_string(lineno) + ": expected " + std::to_string(experts) + " counts");
  }
  return c;
}

}  // namespace ft::tiers
