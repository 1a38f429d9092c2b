#include "deploy/local/gpu_list.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "shared/core/error.h"

namespace ft::local {

namespace {

int count_visible(const std::string& v) {
  int n = 0;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) ++n;
  return n;
}

int count_device_nodes(const std::string& dev_dir) {
  std::error_code ec;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dev_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 && name.find_first_not_of("0123456789", 6) == std::string::npos) ++n;
  }
  return n;
}

}  // namespace

std::vector<int> parse_gpu_list(const std::string& spec, const char* visible, const std::string& dev_dir) {
  std::vector<int> out;
  if (spec == "all") {
    const int n = visible && *visible ? count_visible(visible) : count_device_nodes(dev_dir);
    if (n == 0)
      throw Error("--gpus all: no GPU found (" +
                  (visible && *visible ? std::string("CUDA_VISIBLE_DEVICES names none") : "no " + dev_dir + "/nvidiaN") +
                  ")");
    for (int i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty() || item.size() > 3 || item.find_first_not_of("0123456789") != std::string::npos)
      throw Error("--gpus " + spec + ": '" + item + "' is not a device ordinal (give e.g. 0,1 or all)");
    const int d = std::stoi(item);
    if (std::find(out.begin(), out.end(), d) != out.end()) throw Error("--gpus " + spec + ": device " + item + " twice");
    out.push_back(d);
  }
  if (out.empty()) throw Error("--gpus: empty list (give e.g. 0,1 or all)");
  return out;
}

}  // namespace ft::local
