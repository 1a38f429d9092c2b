#pragma once
// One HTTP request as the endpoints see it (no Beast, no Asio: the fuzz targets include it).
#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ft::gateway {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query as sent
  std::string path;    // without the query
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Case-insensitive lookup; empty when absent.
  std::string header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k.size() == name.size() && std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
          }))
        return v;
    return {};
  }
};

}  // namespace ft::gateway
