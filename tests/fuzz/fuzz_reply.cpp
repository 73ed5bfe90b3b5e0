// libFuzzer target: an LLM's reply, from which kfab takes the candidate's code. Any text must give
// code or an Error whose message can go back to the model; never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <string>

#include "agent/extract.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // the first byte picks the DSL, the rest is the reply
  static const char* kDsls[] = {"cpp", "cuda", "opencl", "triton", "python", "modelnew"};
  const std::string dsl = kDsls[data[0] % 6];
  const std::string reply(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = kfab::extract_code(reply, dsl);
  if (r) {
    if (r->code.size() > reply.size()) __builtin_trap();  // the code comes out of the reply
  } else if (r.error().message.empty()) {
    __builtin_trap();  // a refusal always says why
  }
  return 0;
}
