#pragma once
// A cheap identity for a model folder's weights: config.json, the shard index, and for every
// *.safetensors file its name, size, mtime and JSON header (tensor names, dtypes, shapes and
// offsets) — never the tensor data, so it costs milliseconds even for a 125 GB model, which is
// what makes a restart's re-attach take well under a second.
#include <string>

namespace ft::cew {

// 32 hex digits. Throws ft::Error when the folder has no config.json or no safetensors file.
std::string model_fingerprint(const std::string& model_dir);

}  // namespace ft::cew
