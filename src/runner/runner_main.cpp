// kfab-runner: executes jobs for kfab in a process of its own (docs/runner-protocol.md). Generated
// code is only ever loaded here, never in kfab itself.
#include <csignal>
#include <cstdio>

#include "runner/jobs.h"
#include "runner/protocol.h"

int main() {
  std::signal(SIGPIPE, SIG_IGN);
  for (;;) {
    kfab::ReadResult in = kfab::read_message(kfab::kRunnerRequestFd);
    if (in.status == kfab::ReadStatus::Eof) return 0;
    if (in.status != kfab::ReadStatus::Ok) {
      std::fprintf(stderr, "kfab-runner: %s\n", in.error.c_str());
      return 3;
    }
    if (in.message.value("op", "") == "quit") return 0;
    nlohmann::json reply = kfab::runner::handle(in.message);
    std::fflush(stdout);
    if (!kfab::write_message(kfab::kRunnerReplyFd, reply)) return 4;
  }
}
