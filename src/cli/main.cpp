// kfab's command line: parses arguments and calls the library (DESIGN.md section 2.3).
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <iostream>

#include "cli/commands.h"
#include "core/paths.h"
#include "core/process.h"

int main(int argc, char** argv) {
  kfab::install_child_reaper();
  // Folders of an earlier kfab that was killed before it could remove them (kill -9).
  kfab::sweep_orphaned_temp_dirs();
  // The reference's answers live in kfab's memory while candidates run: no process of this user (a
  // candidate's runner) may read it through /proc/PID/mem or take kfab's descriptors.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  CLI::App app{"kfab: fast, verified compute kernels from a reference computation"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(kfab::cli::kVersion));
  kfab::cli::Commands commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    return commands.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kfab: internal error: %s\n", e.what());
    return 3;
  }
}
