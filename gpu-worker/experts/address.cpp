#include "gpu-worker/experts/address.h"

#include "shared/core/error.h"
#include "shared/ipc/shm.h"

namespace ft {

ExpertAddress ExpertAddress::parse(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string scheme = colon == std::string::npos ? "" : text.substr(0, colon);
  ExpertAddress a;
  a.target = colon == std::string::npos ? "" : text.substr(colon + 1);
  const std::string forms = " (expected shm:<ring>, grpc:<host:port> or auto:<host:port>)";
  if (scheme == "shm") a.kind = Kind::Shm;
  else if (scheme == "grpc") a.kind = Kind::Grpc;
  else if (scheme == "auto") a.kind = Kind::Auto;
  else throw Error("bad expert tier address '" + text + "'" + forms);
  if (a.target.empty()) throw Error("bad expert tier address '" + text + "': nothing after '" + scheme + ":'" + forms);
  if (a.kind == Kind::Shm) {
    try {
      ipc::ShmMapping::check_name(a.target);
    } catch (const Error& e) {
      throw Error("bad expert tier address '" + text + "': " + e.what());
    }
  } else if (a.target.rfind(':') == std::string::npos || a.target.back() == ':') {
    throw Error("bad expert tier address '" + text + "': " + scheme + ": needs host:port" + forms);
  }
  return a;
}

std::string ExpertAddress::str() const {
  return (kind == Kind::Shm ? "shm:" : kind == Kind::Grpc ? "grpc:" : "auto:") + target;
}

}  // namespace ft
