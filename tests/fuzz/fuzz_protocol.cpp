// libFuzzer target: the bytes a runner (or the Python worker) sends back, decoded by kfab's framing
// reader. Every frame must come back as a message, or as Eof / Malformed with a reason; a length
// prefix beyond the limit is refused before anything is allocated.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include "runner/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("kfab-fuzz-protocol", 0);
  if (fd < 0) return 0;
  if (::ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) != 0) return 0;
  for (size_t off = 0; off < size;) {
    const ssize_t w = ::write(fd, data + off, size - off);
    if (w <= 0) return 0;
    off += static_cast<size_t>(w);
  }
  ::lseek(fd, 0, SEEK_SET);
  // a stream of frames, read the way the client reads a reply (with a deadline)
  for (int frames = 0; frames < 64; ++frames) {
    const auto r = kfab::read_message(fd, std::chrono::steady_clock::now() + std::chrono::seconds(5));
    if (r.status != kfab::ReadStatus::Ok) {
      if (r.status == kfab::ReadStatus::Malformed && r.error.empty()) __builtin_trap();  // a refusal always says why
      break;
    }
    (void)r.message.dump();
  }
  return 0;
}
