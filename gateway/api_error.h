#pragma once
// An error answered to a client, OpenAI-shaped:
// {"error": {"message", "type", "param", "code"}} with an HTTP status.
#include <string>

namespace ft::gateway {

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;                          // the offending field; empty → null
  std::string type = "invalid_request_error";
  std::string code;                           // empty → null

  static ApiError bad_field(std::string param, std::string message) {
    return ApiError{400, std::move(message), std::move(param), "invalid_request_error", "invalid_value"};
  }
};

// Defined in openai_schema.cpp (JSON code lives there).
std::string error_json(const ApiError& e);

}  // namespace ft::gateway
