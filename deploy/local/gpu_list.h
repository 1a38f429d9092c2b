#pragma once
// `flashtier-local --gpus`: which CUDA devices get a gpu-worker each.
#include <string>
#include <vector>

namespace ft::local {

// spec: "all" or a comma list of CUDA device ordinals ("0,1"). "all" is every device the process
// may use: as many as CUDA_VISIBLE_DEVICES names when it is set (`visible`, null when unset),
// else one per /dev/nvidiaN in `dev_dir`. Throws ft::Error on a malformed or repeated ordinal, or
// when "all" finds no device.
std::vector<int> parse_gpu_list(const std::string& spec, const char* visible, const std::string& dev_dir = "/dev");

}  // namespace ft::local
