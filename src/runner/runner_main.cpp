// kfab-runner: executes jobs for kfab in a process of its own (docs/runner-protocol.md). Generated
// code is only ever loaded here, never in kfab itself.
#include <sys/prctl.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/text.h"
#include "runner/accelerator.h"
#include "runner/jobs.h"
#include "runner/protocol.h"

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  // One job from a file, the reply on stdout: how a profiler (ncu) runs a candidate under kfab's
  // control without the pipe protocol.
  if (argc == 3 && std::string(argv[1]) == "--job") {
    std::ifstream in(argv[2]);
    nlohmann::json req = nlohmann::json::parse(in, nullptr, false);
    if (req.is_discarded()) {
      std::fprintf(stderr, "kfab-runner: %s is not a JSON request\n", argv[2]);
      return 2;
    }
    const nlohmann::json reply = kfab::runner::handle(req);
    std::printf("%s\n", kfab::dump_json(reply).c_str());
    return reply.value("ok", false) ? 0 : 1;
  }
  // --trusted: this runner serves the reference and the baselines, never candidate code. No process
  // of the same user may read its memory or its descriptors (not dumpable), so a candidate's runner
  // cannot reach the reference's answers here.
  // --open TARGET: the device is opened before the first job arrives. A failure is not reported
  // here: the first job that needs the device reports it.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--trusted") {
      ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
      kfab::runner::set_trusted();
    } else if (a == "--open" && i + 1 < argc) {
      if (kfab::Accelerator* dev = kfab::accelerator(argv[++i]).device) (void)dev->open();
    }
  }
  for (;;) {
    kfab::ReadResult in = kfab::read_message(kfab::kRunnerRequestFd);
    if (in.status == kfab::ReadStatus::Eof) return 0;
    if (in.status != kfab::ReadStatus::Ok) {
      std::fprintf(stderr, "kfab-runner: %s\n", in.error.c_str());
      return 3;
    }
    if (in.message.value("op", "") == "quit") return 0;
    nlohmann::json reply = kfab::runner::handle(in.message);
    if (in.message.contains("nonce")) reply["nonce"] = in.message["nonce"];  // the job's, echoed (RunnerClient::run)
    std::fflush(stdout);
    if (!kfab::write_message(kfab::kRunnerReplyFd, reply)) return 4;
  }
}
