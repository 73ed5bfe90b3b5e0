// Writes every source the built-in tuner generates: each native task's templates at every point, and
// each traced KernelBench Model's program through the cuda and cpu printers at every point; for
// comparing the generators of two trees (scripts/compare_generated.py) after a change to a printer.
// Built against a build folder's libraries (the tracer needs the .venv's torch):
//   cd build && g++ -O1 -std=c++20 -fopenmp -DFMT_SHARED -DTOML_HEADER_ONLY=0 -DTOML_SHARED_LIB=1 \
//     -Ilayers/kfab_tuner -I../include -I../src ../scripts/gen_dump.cpp -o /tmp/gen_dump libkfab_app.a \
//     libkfab_tuner.a libkfab_agent.a libkfab_store.a -lsqlite3 -lcurl libkfab_report.a libkfab_dist.a \
//     libkfab_eval.a libkfab_backends.a libkfab_runner_client.a libkfab_core.a -ltomlplusplus -lgomp \
//     -lpthread -lxxhash -ldl -lhiredis -lfmt
//   /tmp/gen_dump OUT_DIR TRACE_CACHE_DIR tasks/core tasks/kb kernelbench/KernelBench/level1 ...
// The traces are cached in TRACE_CACHE_DIR, so that a second tree generates from the same programs.
#include <fstream>
#include <iostream>
#include <filesystem>
#include <nlohmann/json.hpp>
#include "core/task.h"
#include "eval/torch_harness.h"
#include "tuner/fused.h"
#include "tuner/templates.h"
#include "tuner/tuner.h"
using namespace kfab;
namespace fs = std::filesystem;
int main(int argc, char** argv) {
  const fs::path out = argv[1];
  const fs::path traces = argv[2];
  fs::create_directories(out);
  fs::create_directories(traces);
  int files = 0;
  auto put = [&](const std::string& name, const std::string& src) {
    std::ofstream(out / name) << src;
    ++files;
  };
  for (int a = 3; a < argc; ++a) {
    const fs::path dir = argv[a];
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e.path());
    std::sort(entries.begin(), entries.end());
    for (const auto& e : entries) {
      const std::string stem = e.stem().string();
      for (std::string target : {"cuda", "cpu"}) {
        if (e.extension() == ".py") {
          const fs::path tf = traces / (dir.filename().string() + "_" + stem + "_" + target + ".json");
          nlohmann::json tr;
          if (fs::exists(tf)) {
            std::ifstream(tf) >> tr;
          } else {
            static std::map<std::string, std::unique_ptr<TorchInspector>> insp;
            if (!insp[target]) insp[target] = std::make_unique<TorchInspector>(target, EvalOptions{});
            auto t = insp[target]->trace(e);
            if (!t) { std::cerr << stem << " " << target << ": " << t.error().message << "\n"; continue; }
            tr = *t;
            std::ofstream(tf) << tr.dump();
          }
          auto plan = plan_traced(tr, target);
          if (!plan || plan->dedicated) continue;
          const Printer* pr = printer_for(target);
          if (plan->is_gemm) {
            plan->gemm.epilogue = plan->program;  // as the tuner does
            int i = 0;
            for (const auto& pt : pr->gemm_grid(plan->gemm)) put(stem + "_" + target + "_g" + std::to_string(i++) + ".txt", pr->gemm(plan->gemm, pt, stem));
          } else {
            int i = 0;
            for (const auto& pt : pr->rows_grid(plan->program, tr.value("n", int64_t{1024})))
              put(stem + "_" + target + "_r" + std::to_string(i++) + ".txt", pr->rows(plan->program, pt, stem));
          }
          continue;
        }
        auto task = load_task(e);
        if (!task) continue;
        for (const auto* t : templates_for(*task, target)) {
          int i = 0;
          for (const auto& pt : t->grid(*task)) put(stem + "_" + target + "_" + t->name + std::to_string(i++) + ".txt", t->generate(*task, pt));
        }
      }
    }
  }
  std::cout << files << " files\n";
}
