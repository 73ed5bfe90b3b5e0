#pragma once
/// The runner protocol (docs/runner-protocol.md): messages are JSON objects, each framed by its
/// length as a 4-byte little-endian unsigned integer. kfab writes requests to the runner's fd 3 and
/// reads replies from its fd 4; the runner's stdout and stderr go to a log file in its own folder.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kfab {

constexpr uint32_t kMaxMessageBytes = 64u << 20;
constexpr int kRunnerRequestFd = 3;
constexpr int kRunnerReplyFd = 4;

enum class ReadStatus { Ok, Eof, Timeout, Malformed };

struct ReadResult {
  ReadStatus status = ReadStatus::Ok;
  nlohmann::json message;
  std::string error;  ///< for Malformed
};

/// Writes one framed message; false when the other side is gone.
bool write_message(int fd, const nlohmann::json& msg);
/// Reads one framed message, waiting at most until the deadline (forever without one).
ReadResult read_message(int fd, std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

}  // namespace kfab
