#include "runner/protocol.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace kfab {

using Clock = std::chrono::steady_clock;

bool write_message(int fd, const nlohmann::json& msg) {
  const std::string body = msg.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (body.size() > kMaxMessageBytes) return false;
  const auto n = static_cast<uint32_t>(body.size());
  std::string frame(4, '\0');
  for (int i = 0; i < 4; ++i) frame[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xffu);
  frame += body;
  size_t off = 0;
  while (off < frame.size()) {
    ssize_t w = ::write(fd, frame.data() + off, frame.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

namespace {

// Reads exactly n bytes; Eof if the stream ends first, Timeout at the deadline.
ReadStatus read_exact(int fd, char* buf, size_t n, std::optional<Clock::time_point> deadline, bool* got_any) {
  size_t off = 0;
  while (off < n) {
    int wait_ms = -1;
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      if (left <= 0) return ReadStatus::Timeout;
      wait_ms = static_cast<int>(std::min<long long>(left, 1000));
    }
    struct pollfd p = {fd, POLLIN, 0};
    int r = ::poll(&p, 1, wait_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) continue;
    ssize_t got = ::read(fd, buf + off, n - off);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return ReadStatus::Eof;
    off += static_cast<size_t>(got);
    *got_any = true;
  }
  return ReadStatus::Ok;
}

}  // namespace

ReadResult read_message(int fd, std::optional<Clock::time_point> deadline) {
  ReadResult r;
  unsigned char len[4];
  bool any = false;
  r.status = read_exact(fd, reinterpret_cast<char*>(len), 4, deadline, &any);
  if (r.status != ReadStatus::Ok) return r;
  const uint32_t n = len[0] | (len[1] << 8) | (len[2] << 16) | (static_cast<uint32_t>(len[3]) << 24);
  if (n > kMaxMessageBytes) {
    r.status = ReadStatus::Malformed;
    r.error = "frame of " + std::to_string(n) + " bytes exceeds the limit";
    return r;
  }
  std::string body(n, '\0');
  r.status = read_exact(fd, body.data(), n, deadline, &any);
  if (r.status == ReadStatus::Eof) {
    r.status = ReadStatus::Malformed;
    r.error = "stream ended inside a frame";
  }
  if (r.status != ReadStatus::Ok) return r;
  try {
    r.message = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    r.status = ReadStatus::Malformed;
    r.error = std::string("not JSON: ") + e.what();
  }
  if (r.status == ReadStatus::Ok && !r.message.is_object()) {
    r.status = ReadStatus::Malformed;
    r.error = "not a JSON object";
  }
  return r;
}

}  // namespace kfab
