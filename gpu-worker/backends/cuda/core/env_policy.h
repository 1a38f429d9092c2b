#pragma once
// Start values of the engine's switchable policies from the environment (A/B runs of a policy in
// one benchmark call): `var`=off|auto|on gives 0, 1 or 2; unset or anything else, 1 (auto).
#include <cstdlib>
#include <string>

namespace ft::cuda {

inline int policy_from_env(const char* var) {
  const char* v = std::getenv(var);
  if (!v) return 1;
  const std::string s(v);
  return s == "off" ? 0 : s == "on" ? 2 : 1;
}

// Whether `var` switches an on-by-default policy off.
inline bool env_off(const char* var) { return policy_from_env(var) == 0; }

}  // namespace ft::cuda
