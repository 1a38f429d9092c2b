#include "gpu-worker/tiers/expert_cache.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "shared/core/error.h"

namespace ft::tiers {

ExpertCache::ExpertCache(int layers, int experts, int slots, CachePolicy policy)
    : layers_(layers), experts_(experts), where_(static_cast<size_t>(layers) * experts, -1),
      slot_owner_(static_cast<size_t>(std::max(slots, 0)), {-1, -1}), ref_(slot_owner_.size(), 0),
      pinned_at_(slot_owner_.size(), 0), usable_(static_cast<int>(slot_owner_.size())),
      counters_(static_cast<size_t>(layers)), policy_(policy), uses_(where_.size(), 0), total_uses_(where_.size(), 0),
      in_window_(slot_owner_.size(), 0) {
  if (policy_.age_every <= 0) policy_.age_every = 64 * std::max(slots, 1);
  if (policy_.frequency_gate && slots > 1)
    window_slots_ = std::clamp(static_cast<int>(policy_.window * slots + 0.5), 0, slots - 1);
  for (int s = 0; s < window_slots_; ++s) in_window_[s] = 1;
}

void ExpertCache::begin_step(bool admit) {
  ++step_;  // pins are "pinned_at_ == step_": ending a step unpins everything at once
  if (step_ == 0) {  // wrapped: clear stale pins
    std::fill(pinned_at_.begin(), pinned_at_.end(), 0);
    step_ = 1;
  }
  admit_ = admit;
}

std::optional<int> ExpertCache::lookup(int layer, int expert) {
  uint32_t& u = uses_[key(layer, expert)];
  if (u < UINT32_MAX) ++u;
  ++total_uses_[key(layer, expert)];
  if (++lookups_ >= static_cast<uint64_t>(policy_.age_every)) {
    for (uint32_t& v : uses_) v >>= 1;
    lookups_ = 0;
  }
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

int ExpertCache::clock_victim(bool window) {
  // CLOCK over the usable slots of one region: at most two sweeps (the first clears reference
  // bits), skipping slots this step pinned; an empty slot is taken at once. −1: all pinned.
  const int n = usable_;
  int& hand = window ? window_hand_ : hand_;
  for (int tries = 0; tries < 2 * n; ++tries) {
    if (hand >= n) hand = 0;
    const int s = hand++;
    if (static_cast<bool>(in_window_[s]) != window || pinned_at_[s] == step_) continue;
    if (slot_owner_[s].first >= 0 && ref_[s]) {
      ref_[s] = 0;
      continue;
    }
    return s;
  }
  return -1;
}

void ExpertCache::place(int s, int layer, int expert, std::pair<int, int>* evicted) {
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
}

std::optional<int> ExpertCache::admit(int layer, int expert, std::pair<int, int>* evicted, bool* declined) {
  if (evicted) *evicted = {-1, -1};
  if (declined) *declined = false;
  if (!admit_ || slot_owner_.empty()) return std::nullopt;
  if (const int s = where_[key(layer, expert)]; s >= 0) {  // already present (admitted earlier this step)
    pinned_at_[s] = step_;
    return s;
  }
  if (usable_ == 0) return std::nullopt;
  auto decline = [&] {
    ++declined_;
    if (declined) *declined = true;
    return std::nullopt;
  };
  auto uses_of = [&](int s) { return uses_[key(slot_owner_[s].first, slot_owner_[s].second)]; };
  const uint32_t mine = uses_[key(layer, expert)];
  if (!policy_.frequency_gate) {  // plain CLOCK over every slot
    const int s = clock_victim(false);
    if (s < 0) return std::nullopt;
    place(s, layer, expert, evicted);
    return s;
  }
  // The window: a newcomer enters there; the window's victim then competes with the main
  // region's victim on recent uses, and the loser leaves the cache. No block moves: the winner
  // stays in its slot, and the two slots swap regions.
  const int v = window_slots_ > 0 ? clock_victim(true) : -1;
  if (v >= 0 && slot_owner_[v].first < 0) {  // room in the window
    place(v, layer, expert, evicted);
    return v;
  }
  // Only now the main region's victim: its sweep clears reference bits and moves the hand.
  const int m = clock_victim(false);
  if (v >= 0) {
    if (m < 0 || (slot_owner_[m].first >= 0 && uses_of(m) >= uses_of(v))) {
      place(v, layer, expert, evicted);  // the window's victim leaves
      return v;
    }
    // The window's victim earns the main slot's place: v joins the main region, m the window.
    in_window_[v] = 0;
    in_window_[m] = 1;
    place(m, layer, expert, evicted);
    return m;
  }
  // No window (or all of it pinned): the newcomer competes with the main victim directly.
  if (m < 0) return std::nullopt;
  if (slot_owner_[m].first >= 0 && uses_of(m) > mine) return decline();
  place(m, layer, expert, evicted);
  return m;
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
      bool declined = false;
      const std::optional<int> slot = cache.admit(l, a.expert, &a.evicted, &declined);
      if (!slot && declined) {  // the victim is the more used: this miss stays out, others may not
        idle = 0;
        l = (l + 1) % layers;
        continue;
      }
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
  long double total = 0;
  for (const auto& [cnt, k] : order) total += static_cast<long double>(cnt);
  if (total > 0) {
    const long double scale = static_cast<long double>(policy_.age_every) / 2 / total;
    for (const auto& [cnt, k] : order)
      uses_[k] = static_cast<uint32_t>(std::min<long double>(std::llround(cnt * scale), UINT32_MAX));
  }
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

std::vector<std::vector<uint64_t>> ExpertCache::use_counts() const {
  std::vector<std::vector<uint64_t>> c(static_cast<size_t>(layers_));
  for (int l = 0; l < layers_; ++l)
    c[l].assign(total_uses_.begin() + static_cast<int64_t>(l) * experts_,
                total_uses_.begin() + static_cast<int64_t>(l + 1) * experts_);
  return c;
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

void write_routing_stats(const std::string& path, const std::vector<std::vector<uint64_t>>& counts) {
  std::ofstream f(path);
  if (!f) throw Error(path + ": cannot write the routing-statistics file");
  f << "# flashtier routing statistics: one line per MoE layer, the layer index then each expert's use count\n";
  for (size_t l = 0; l < counts.size(); ++l) {
    f << l;
    for (uint64_t c : counts[l]) f << ' ' << c;
    f << '\n';
  }
  if (!f) throw Error(path + ": writing the routing-statistics file failed");
}

}  // namespace ft::tiers
