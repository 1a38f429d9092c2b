// Routing, authentication and the small endpoints: /health, /v1/models, /metrics, /tokenize,
// /detokenize, /server_info.
#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "gateway/anthropic_schema.h"
#include "gateway/endpoints.h"
#include "gateway/openai_schema.h"
#include "shared/core/error.h"

namespace ft::gateway {

using json = nlohmann::ordered_json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const int64_t kStarted = unix_now();

bool same(std::string_view a, std::string_view b) {  // constant time for equal lengths
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

json model_card(const App& app) {
  json card = {{"id", app.model->served_name()}, {"object", "model"}, {"created", kStarted}, {"owned_by", "flashtier"},
               {"root", app.model->model_dir()}, {"parent", nullptr}};
  if (auto info = app.pool->model_info()) card["max_model_len"] = info->context_length();
  return card;
}

// GCC 12 mishandles std::initializer_list temporaries inside coroutines (double frees), so every
// JSON body is built in a plain function and the coroutines only send it.
struct Reply {
  int status = 200;
  std::string body;
};

Reply reply(int status, const json& j) { return {status, dump(j)}; }

Reply health(App& app) {
  json workers = json::array();
  for (const auto& w : app.pool->snapshot())
    workers.push_back({{"address", w.address}, {"state", w.state}, {"ready", w.ready}, {"detail", w.detail}, {"outstanding", w.outstanding}});
  bool ok = app.pool->any_ready();
  return reply(ok ? 200 : 503, {{"status", ok ? "ok" : "unavailable"}, {"workers", workers}});
}

Reply server_info(App& app) {
  auto info = app.pool->model_info();
  json j = {{"model_path", app.model->model_dir()},
            {"tokenizer_path", app.model->model_dir()},
            {"served_model_name", app.model->served_name()},
            {"context_length", info ? json(info->context_length()) : json(nullptr)},
            {"max_total_num_tokens", info ? json(info->context_length()) : json(nullptr)},
            {"vocab_size", app.model->vocab_size()},
            {"eos_token_ids", app.model->eos_ids()},
            {"is_generation", true},
            {"version", "flashtier-gateway 0.1"},
            {"max_running_requests", app.opts.max_queue},
            {"workers", json::array()}};
  if (info) {
    j["model_type"] = info->model_type();
    j["max_batch_size"] = info->max_batch_size();
  }
  for (const auto& w : app.pool->snapshot())
    j["workers"].push_back({{"address", w.address}, {"state", w.state}, {"running", w.running}, {"waiting", w.waiting}});
  return reply(200, j);
}

Reply model_info(App& app) {
  return reply(200, {{"model_path", app.model->model_dir()},
                     {"tokenizer_path", app.model->model_dir()},
                     {"is_generation", true},
                     {"served_model_name", app.model->served_name()}});
}

Reply models(App& app) { return reply(200, {{"object", "list"}, {"data", json::array({model_card(app)})}}); }

Reply tokenize(App& app, const std::string& body) {
  try {
    TokenizeSpec s = parse_tokenize_request(body);
    std::string text;
    if (s.prompt) {
      text = *s.prompt;
    } else {
      if (!app.model->has_chat_template())
        throw ApiError{500, "the model has no usable chat template: " + app.model->chat_template_error(), "", "server_error", "no_chat_template"};
      try {
        text = app.model->render_chat(*s.chat_request);
      } catch (const std::exception& e) {
        throw ApiError::bad_field("messages", std::string("the chat template could not render these messages: ") + e.what());
      }
    }
    auto ids = app.model->tokenizer().encode(text);
    json out = {{"tokens", ids}, {"count", ids.size()}};
    if (auto info = app.pool->model_info()) out["max_model_len"] = info->context_length();
    return reply(200, out);
  } catch (const ApiError& e) {
    return {e.status, error_json(e)};
  }
}

Reply detokenize(App& app, const std::string& body) {
  try {
    auto ids = parse_detokenize_request(body, {app.opts.max_n, app.model->vocab_size(), app.model->served_name()});
    return reply(200, {{"prompt", app.model->tokenizer().decode(ids, false)}});
  } catch (const ApiError& e) {
    return {e.status, error_json(e)};
  }
}

Reply model_by_id(App& app, const std::string& id) {
  if (id != app.model->served_name())
    return {404, error_json(ApiError{404, "The model '" + id + "' does not exist", "model", "invalid_request_error", "model_not_found"})};
  return reply(200, model_card(app));
}

asio::awaitable<int> send(HttpExchange& ex, Reply r) {
  co_await ex.respond(r.status, "application/json", std::move(r.body));
  co_return r.status;
}

struct Route {
  const char* path;
  bool post;
};
const Route kRoutes[] = {
    {"/v1/chat/completions", true}, {"/v1/completions", true}, {"/generate", true},   {"/tokenize", true},
    {"/detokenize", true},          {"/v1/models", false},     {"/health", false},    {"/health_generate", false},
    {"/metrics", false},            {"/server_info", false},   {"/get_server_info", false}, {"/get_model_info", false},
    {"/v1/tokenize", true},         {"/v1/detokenize", true},  {"/v1/messages", true},
    {"/v1/messages/count_tokens", true}};

}  // namespace

std::string new_request_id(App& app, const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(app.next_id.fetch_add(1)));
  return std::string(prefix) + buf;
}

asio::awaitable<int> respond_error(HttpExchange& ex, const ApiError& e) {
  if (ex.responded()) co_return e.status;
  std::vector<std::pair<std::string, std::string>> extra;
  if (e.status == 429 || e.status == 503) extra.emplace_back("Retry-After", "1");
  if (e.status == 401) extra.emplace_back("WWW-Authenticate", "Bearer");
  std::string body = is_anthropic_path(ex.request().path) ? anthropic_error_json(e) : error_json(e);
  co_await ex.respond(e.status, "application/json", std::move(body), std::move(extra));
  co_return e.status;
}

namespace {

// Unknown path, wrong method, missing or wrong API key.
std::optional<ApiError> admission_error(const App& app, const HttpRequest& req) {
  const std::string& path = req.path;
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool post = req.method == "POST";
  const Route* route = nullptr;
  for (const auto& r : kRoutes)
    if (path == r.path) route = &r;
  const bool by_id = path.rfind("/v1/models/", 0) == 0;
  if (!route && !by_id) return ApiError{404, "no such endpoint: " + req.method + " " + path, "", "invalid_request_error", "not_found"};
  if ((route && route->post && !post) || ((by_id || (route && !route->post)) && !get))
    return ApiError{405, "method " + req.method + " is not allowed on " + path, "", "invalid_request_error", "method_not_allowed"};
  if (!app.opts.api_key.empty() && path != "/health" && path != "/metrics") {
    const std::string auth = req.header("authorization");
    const std::string x_api_key = req.header("x-api-key");  // Anthropic clients send the key here
    std::string_view token = x_api_key;
    if (auth.size() > 7 && (auth.rfind("Bearer ", 0) == 0 || auth.rfind("bearer ", 0) == 0)) token = std::string_view(auth).substr(7);
    if (!same(token, app.opts.api_key)) {
      std::string msg = auth.empty() && x_api_key.empty()
                            ? "missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')"
                            : "incorrect API key provided";
      return ApiError{401, msg, "", "invalid_request_error", "invalid_api_key"};
    }
  }
  return std::nullopt;
}

}  // namespace

asio::awaitable<int> handle_request(App& app, HttpExchange& ex) {
  const HttpRequest& req = ex.request();
  const std::string& path = req.path;
  std::optional<ApiError> refused = admission_error(app, req);
  if (refused) co_return co_await respond_error(ex, *refused);

  if (path == "/v1/chat/completions") co_return co_await handle_chat_completions(app, ex);
  if (path == "/v1/completions") co_return co_await handle_completions(app, ex);
  if (path == "/generate") co_return co_await handle_sglang_generate(app, ex);
  if (path == "/v1/messages") co_return co_await handle_anthropic_messages(app, ex);
  if (path == "/v1/messages/count_tokens") co_return co_await handle_anthropic_count_tokens(app, ex);
  if (path == "/tokenize" || path == "/v1/tokenize") {
    Reply r = tokenize(app, req.body);
    co_return co_await send(ex, std::move(r));
  }
  if (path == "/detokenize" || path == "/v1/detokenize") {
    Reply r = detokenize(app, req.body);
    co_return co_await send(ex, std::move(r));
  }
  if (path == "/health" || path == "/health_generate") {
    Reply r = health(app);
    co_return co_await send(ex, std::move(r));
  }
  if (path == "/metrics") {
    std::string text = app.metrics.render();
    text += app.pool->render_metrics();
    co_await ex.respond(200, "text/plain; version=0.0.4; charset=utf-8", std::move(text));
    co_return 200;
  }
  if (path == "/server_info" || path == "/get_server_info") {
    Reply r = server_info(app);
    co_return co_await send(ex, std::move(r));
  }
  if (path == "/get_model_info") {
    Reply r = model_info(app);
    co_return co_await send(ex, std::move(r));
  }
  if (path == "/v1/models") {
    Reply r = models(app);
    co_return co_await send(ex, std::move(r));
  }
  {
    Reply r = model_by_id(app, path.substr(std::string("/v1/models/").size()));
    co_return co_await send(ex, std::move(r));
  }
}

}  // namespace ft::gateway
