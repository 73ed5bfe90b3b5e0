#pragma once
/// LLM providers: OpenAI-compatible chat completions (OpenAI, vLLM, SGLang, Ollama, llama.cpp server,
/// DeepSeek, ...) and Anthropic messages, over libcurl. Timeouts, retries with backoff on 429, 5xx and
/// dropped connections (Retry-After honoured), a concurrency limit, and tokens and dollars per call.
/// Keys come from environment variables named in the config, never from files.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.h"

namespace kfab {

struct ProviderConfig {
  std::string name;          ///< the config's table name ("local", "openai", ...)
  std::string kind;          ///< "openai" (chat completions) or "anthropic" (messages)
  std::string base_url;      ///< e.g. http://127.0.0.1:8000/v1
  std::string model;
  std::string api_key_env;   ///< environment variable holding the key; empty: no key sent
  double price_input_per_mtok = 0.0;   ///< dollars per million prompt tokens
  double price_output_per_mtok = 0.0;  ///< dollars per million completion tokens
  double timeout_s = 300.0;  ///< per attempt
  int max_retries = 4;
  int concurrency = 4;       ///< calls in flight at once, per client
  int max_tokens = 8192;
  double temperature = 0.2;
};

/// `--llm PROVIDER:MODEL` resolved against the config file (`config`, else
/// ~/.config/kfab/config.toml when it exists); "openai" and "anthropic" have built-in defaults.
Expected<ProviderConfig> resolve_provider(const std::string& spec, const std::filesystem::path& config);

struct ChatMessage {
  std::string role;  ///< system, user, assistant
  std::string content;
};

struct ChatReply {
  std::string text;
  int64_t tokens_in = 0;
  int64_t tokens_out = 0;
  double cost = 0.0;           ///< dollars
  std::string finish_reason;   ///< stop, length, ...
  int attempts = 1;
  double seconds = 0.0;
};

class LlmClient {
 public:
  virtual ~LlmClient() = default;
  /// One exchange; an Error after the retries are spent (the message says what the server said).
  virtual Expected<ChatReply> chat(const std::vector<ChatMessage>& messages) = 0;
  virtual std::string describe() const = 0;
};

/// The HTTP client for a provider. Null (with an Error) when kfab was built without libcurl.
Expected<std::unique_ptr<LlmClient>> make_http_client(const ProviderConfig& p);

/// The request body a provider is sent for these messages (also what record/replay hashes).
nlohmann::json chat_request(const ProviderConfig& p, const std::vector<ChatMessage>& messages);

}  // namespace kfab
