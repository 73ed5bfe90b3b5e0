// libFuzzer target: a task manifest (task.toml) of arbitrary bytes. load_task must return a task or an
// Error naming what is wrong; it must never crash, hang or read out of bounds.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/task.h"

namespace {

const std::filesystem::path& task_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("kfab-fuzz-manifest-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    // a reference for the manifests that name one, so parsing goes past the file checks
    std::ofstream(d / "reference.cpp") << "// reference\n";
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(task_dir() / "task.toml", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto task = kfab::load_task(task_dir());
  if (task) {
    // what kfab does next with a task that loaded: its shapes and costs
    for (const auto* set : {&task->tune, &task->heldout, &task->tune_gpu})
      for (const auto& s : *set) {
        (void)kfab::format_binding(s);
        (void)task->flops(s);
        (void)task->bytes(s);
        for (const auto& t : task->inputs) (void)task->dims(t, s);
        for (const auto& t : task->outputs) (void)task->tolerance_for(t);
      }
  } else {
    (void)task.error().message.size();
  }
  return 0;
}
