#include "agent/llm.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <toml++/toml.h>

#include "core/paths.h"
#include "core/text.h"

#ifdef KFAB_HAVE_CURL
#include <curl/curl.h>
#endif

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

Expected<ProviderConfig> resolve_provider(const std::string& spec, const fs::path& config) {
  const auto colon = spec.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size())
    return make_error("--llm " + spec + ": expected PROVIDER:MODEL", "e.g. openai:gpt-4.1, anthropic:claude-sonnet-4-5, local:qwen");
  ProviderConfig p;
  p.name = spec.substr(0, colon);
  p.model = spec.substr(colon + 1);
  if (p.name == "openai") {
    p.kind = "openai";
    p.base_url = "https://api.openai.com/v1";
    p.api_key_env = "OPENAI_API_KEY";
  } else if (p.name == "anthropic") {
    p.kind = "anthropic";
    p.base_url = "https://api.anthropic.com/v1";
    p.api_key_env = "ANTHROPIC_API_KEY";
  }
  fs::path file = config;
  std::error_code ec;
  if (file.empty()) {
    const char* xdg = std::getenv("XDG_CONFIG_HOME");
    const char* home = std::getenv("HOME");
    fs::path def = xdg && *xdg ? fs::path(xdg) / "kfab/config.toml" : fs::path(home ? home : ".") / ".config/kfab/config.toml";
    if (fs::exists(def, ec)) file = def;
  } else if (!fs::exists(file, ec)) {
    return make_error(file.string() + ": no such config file");
  }
  if (!file.empty()) {
    toml::table root;
    try {
      root = toml::parse_file(file.string());
    } catch (const toml::parse_error& e) {
      return make_error(fmt::format("{}:{}:{}: {}", file.string(), e.source().begin.line, e.source().begin.column, e.description()));
    }
    if (const toml::table* t = root["providers"][p.name].as_table()) {
      for (const auto& [k, v] : *t) {
        const std::string key(k.str());
        auto str = [&](std::string& out) {
          if (!v.is_string()) return false;
          out = v.as_string()->get();
          return true;
        };
        auto num = [&](double& out) {
          if (auto d = v.value<double>()) {
            out = *d;
            return true;
          }
          return false;
        };
        double d = 0;
        bool ok = true;
        if (key == "kind") ok = str(p.kind);
        else if (key == "base_url") ok = str(p.base_url);
        else if (key == "api_key_env") ok = str(p.api_key_env);
        else if (key == "price_input_per_mtok") ok = num(p.price_input_per_mtok);
        else if (key == "price_output_per_mtok") ok = num(p.price_output_per_mtok);
        else if (key == "timeout_s") ok = num(p.timeout_s);
        else if (key == "temperature") ok = num(p.temperature);
        else if (key == "max_retries") { ok = num(d); p.max_retries = static_cast<int>(d); }
        else if (key == "concurrency") { ok = num(d); p.concurrency = std::max(1, static_cast<int>(d)); }
        else if (key == "max_tokens") { ok = num(d); p.max_tokens = static_cast<int>(d); }
        else return make_error(fmt::format("{}: providers.{}.{}: unknown field", file.string(), p.name, key),
                               "accepted: kind, base_url, api_key_env, price_input_per_mtok, price_output_per_mtok, "
                               "timeout_s, max_retries, concurrency, max_tokens, temperature");
        if (!ok) return make_error(fmt::format("{}: providers.{}.{}: wrong type", file.string(), p.name, key));
      }
    }
  }
  if (p.kind.empty())
    return make_error("--llm " + spec + ": no provider named " + p.name,
                      "add [providers." + p.name + "] with kind and base_url to " +
                          (file.empty() ? std::string("~/.config/kfab/config.toml (or --config)") : file.string()));
  if (p.kind != "openai" && p.kind != "anthropic")
    return make_error("providers." + p.name + ".kind: " + p.kind + " is not openai or anthropic");
  if (p.base_url.empty()) return make_error("providers." + p.name + ": base_url is missing");
  while (!p.base_url.empty() && p.base_url.back() == '/') p.base_url.pop_back();
  return p;
}

json chat_request(const ProviderConfig& p, const std::vector<ChatMessage>& messages) {
  json msgs = json::array();
  std::string system;
  for (const auto& m : messages) {
    if (p.kind == "anthropic" && m.role == "system") {
      system += (system.empty() ? "" : "\n\n") + m.content;
      continue;
    }
    msgs.push_back({{"role", m.role}, {"content", m.content}});
  }
  json body = {{"model", p.model}, {"messages", msgs}, {"max_tokens", p.max_tokens}, {"temperature", p.temperature}};
  if (!system.empty()) body["system"] = system;
  return body;
}

#ifdef KFAB_HAVE_CURL

namespace {

size_t collect(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

size_t header_line(char* data, size_t size, size_t n, void* out) {
  std::string h(data, size * n);
  auto* retry_after = static_cast<double*>(out);
  std::string lower;
  for (char c : h) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.rfind("retry-after:", 0) == 0) *retry_after = std::atof(h.c_str() + 12);
  return size * n;
}

class Semaphore {
 public:
  explicit Semaphore(int n) : n_(n) {}
  void acquire() {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return n_ > 0; });
    --n_;
  }
  void release() {
    std::lock_guard lk(m_);
    ++n_;
    cv_.notify_one();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_;
};

class HttpLlm final : public LlmClient {
 public:
  explicit HttpLlm(ProviderConfig p) : p_(std::move(p)), slots_(p_.concurrency) {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  }
  std::string describe() const override { return p_.name + ":" + p_.model + " (" + p_.kind + ", " + p_.base_url + ")"; }

  Expected<ChatReply> chat(const std::vector<ChatMessage>& messages) override {
    const std::string body = dump_json(chat_request(p_, messages));
    const std::string url = p_.base_url + (p_.kind == "anthropic" ? "/messages" : "/chat/completions");
    std::string key;
    if (!p_.api_key_env.empty())
      if (const char* k = std::getenv(p_.api_key_env.c_str())) key = k;
    const auto start = std::chrono::steady_clock::now();
    std::string last_error;
    slots_.acquire();
    struct Release {
      Semaphore& s;
      ~Release() { s.release(); }
    } release{slots_};
    for (int attempt = 0; attempt <= p_.max_retries; ++attempt) {
      std::string response;
      double retry_after = 0.0;
      long status = 0;
      CURL* h = curl_easy_init();
      if (h == nullptr) return make_error("libcurl: cannot create a handle");
      curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
      if (!key.empty()) {
        headers = curl_slist_append(headers, (p_.kind == "anthropic" ? "x-api-key: " + key : "Authorization: Bearer " + key).c_str());
      }
      if (p_.kind == "anthropic") headers = curl_slist_append(headers, "anthropic-version: 2023-06-01");
      curl_easy_setopt(h, CURLOPT_URL, url.c_str());
      curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
      curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
      curl_easy_setopt(h, CURLOPT_WRITEDATA, &response);
      curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_line);
      curl_easy_setopt(h, CURLOPT_HEADERDATA, &retry_after);
      curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(p_.timeout_s * 1000));
      curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
      curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
      const CURLcode rc = curl_easy_perform(h);
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
      curl_slist_free_all(headers);
      curl_easy_cleanup(h);
      // A provider's body is any bytes; JSON is UTF-8 (RFC 8259), so a bad byte becomes U+FFFD here
      // rather than failing the parse and costing a retry.
      response = printable(response);
      bool retry = false;
      if (rc != CURLE_OK) {
        last_error = std::string("the connection failed: ") + curl_easy_strerror(rc);
        retry = true;
      } else if (status == 429 || status >= 500) {
        last_error = fmt::format("HTTP {}: {}", status, printable(response, 500));
        retry = true;
      } else if (status != 200) {
        return make_error(fmt::format("{} answered HTTP {}: {}", describe(), status, printable(response, 1000)),
                          status == 401 || status == 403 ? "check the key in $" + p_.api_key_env : "");
      } else {
        auto parsed = parse(response);
        if (parsed) {
          parsed->attempts = attempt + 1;
          parsed->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          return parsed;
        }
        last_error = parsed.error().message;
        retry = true;  // a truncated or malformed body: ask again
      }
      if (!retry || attempt == p_.max_retries) break;
      const double backoff = retry_after > 0 ? std::min(retry_after, 60.0) : std::min(30.0, 0.5 * std::pow(2.0, attempt));
      std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(backoff * 1000)));
    }
    return make_error(fmt::format("{}: no answer after {} attempts; last: {}", describe(), p_.max_retries + 1, last_error));
  }

 private:
  Expected<ChatReply> parse(const std::string& text) const {
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      return make_error(std::string("the reply is not JSON: ") + e.what());
    }
    ChatReply r;
    try {
      if (p_.kind == "anthropic") {
        for (const auto& c : j.at("content"))
          if (c.value("type", "") == "text") r.text += c.value("text", "");
        r.finish_reason = j.value("stop_reason", "");
        r.tokens_in = j["usage"].value("input_tokens", 0);
        r.tokens_out = j["usage"].value("output_tokens", 0);
      } else {
        const json& choice = j.at("choices").at(0);
        const json& content = choice.at("message").at("content");
        r.text = content.is_string() ? content.get<std::string>() : "";
        r.finish_reason = choice.value("finish_reason", "");
        if (j.contains("usage") && j["usage"].is_object()) {
          r.tokens_in = j["usage"].value("prompt_tokens", 0);
          r.tokens_out = j["usage"].value("completion_tokens", 0);
        }
      }
    } catch (const json::exception& e) {
      return make_error(std::string("the reply lacks the expected fields: ") + e.what());
    }
    r.cost = (static_cast<double>(r.tokens_in) * p_.price_input_per_mtok + static_cast<double>(r.tokens_out) * p_.price_output_per_mtok) / 1e6;
    return r;
  }

  ProviderConfig p_;
  Semaphore slots_;
};

}  // namespace

Expected<std::unique_ptr<LlmClient>> make_http_client(const ProviderConfig& p) {
  return std::unique_ptr<LlmClient>(std::make_unique<HttpLlm>(p));
}

#else

Expected<std::unique_ptr<LlmClient>> make_http_client(const ProviderConfig& p) {
  return make_error("kfab was built without libcurl: LLM providers are not available (" + p.name + ")",
                    "install libcurl4-openssl-dev and build again");
}

#endif

}  // namespace kfab
