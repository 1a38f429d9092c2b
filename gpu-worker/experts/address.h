#pragma once
// Expert tier addresses: shm:<ring> (co-located worker), grpc:<host:port> (anywhere),
// auto:<host:port> (ask the worker's Info; its ring when it runs on this host, else gRPC).
#include <string>

namespace ft {

struct ExpertAddress {
  enum class Kind { Shm, Grpc, Auto };
  Kind kind = Kind::Grpc;
  std::string target;  // ring name or host:port

  // Throws ft::Error naming the accepted forms.
  static ExpertAddress parse(const std::string& text);
  std::string str() const;
};

}  // namespace ft
