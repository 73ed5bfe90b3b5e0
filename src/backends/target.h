#pragma once
/// A target, described in one place. Each backend folder (backends/<name>/) defines one Target: what
/// the rest of kfab needs to know of it, so that no code outside src/backends/ asks for a target by
/// name. backends/targets.def lists the folders once; kfab's registry (registry.cpp) and kfab-runner's
/// devices (runner/accelerator.cpp) are both made from that list.
///
/// A folder has two halves: the host half (its Backend, which builds candidates, and this Target), in
/// the library kfab_backends; and the device half (an Accelerator, in files named device*.cpp), which
/// only kfab-runner links. A target whose candidates run in host memory (cpu) has no Accelerator.

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "core/expected.h"

namespace kfab {

/// Variables that pin a process to one device (CUDA_VISIBLE_DEVICES=...).
using DeviceEnv = std::vector<std::pair<std::string, std::string>>;

struct Target {
  std::string_view name;  ///< on the command line: cpu, cuda, opencl
  /// Every suffix of a file it takes (its Backend's extensions()), the one for new files first: data,
  /// so that finding a file's target builds no Backend (which probes the machine).
  std::vector<std::string> suffixes;
  /// Its candidates' language (cpp, cuda, opencl) and what a candidate in it is, for the LLM prompts.
  std::string_view dsl;
  std::string_view dsl_rules;
  /// The suffix of a new candidate file.
  const std::string& suffix() const { return suffixes.front(); }

  // Where a candidate's data live.
  /// In host memory, called on the host: no Accelerator, the runner's address space is limited.
  bool on_host = false;
  /// A GPU: the task's GPU tuning shapes apply, and its peaks are measured while the compilers work
  /// (the device is not the CPU they keep busy).
  bool gpu = false;
  /// The runner may start programs (posix_spawn, never fork): PoCL links each program it builds.
  bool runner_spawns = false;
  /// torch's device for KernelBench-format tasks ("cpu", "cuda"); empty: such tasks do not run here.
  std::string_view torch_device;
  /// Python candidates (`run(inputs, outputs)` with Triton) run on this target's torch device.
  bool triton = false;
  /// The [reference] key of a native task's own baseline on this target (`cuda = "reference.cu"`),
  /// timed in place of the C++ reference; empty: none.
  std::string_view task_baseline;

  // Timing.
  std::string_view flush;  ///< what empties the caches before a timed call (the verdict's protocol)
  std::string_view timer;  ///< what times a call
  double tuner_min_time_s = 0.03;  ///< the tuner's brief timing of each point
  /// The profiler `kfab eval --profile` runs ("ncu"); empty: none.
  std::string_view profiler;

  /// A new Backend (it probes the machine: cheap, cached).
  std::unique_ptr<Backend> (*make_backend)() = nullptr;
  /// What pins a process to device `index` of this host; nullptr where a target does not pin (its
  /// evaluations at once share the one device).
  Expected<DeviceEnv> (*pin)(int index) = nullptr;
  /// The timing lock's name for the device a process with `env` (on top of this one's) uses; nullptr:
  /// this target's timings are not serialised across processes.
  std::string (*lock_key)(const std::map<std::string, std::string>& env) = nullptr;
  /// Facts of the machine for the prompts beyond its measured peaks ("8 hardware threads").
  std::string (*prompt_facts)() = nullptr;
};

/// Every target compiled in, in targets.def's order.
const std::vector<const Target*>& targets();
/// The target of that name; nullptr if there is none.
const Target* find_target(std::string_view name);
/// "cpu, cuda, opencl".
std::string target_names();
/// The target whose candidates a file is: the longest of their suffixes the name ends with (a.cl.cpp
/// is opencl's, a.cpp cpu's); nullptr for none.
const Target* target_of_file(const std::filesystem::path& file);
/// The target whose candidates run on this host (cpu).
const Target& host_target();
/// The target kfab picks when none is given: a GPU target that is usable here, else the host's.
const Target& default_target();
/// The target whose torch device runs KernelBench-format tasks by default: as default_target(),
/// among those with a torch device.
const Target& default_torch_target();

/// The devices a run spreads its evaluations over: `given`, else every device of a host with several
/// (empty: one device, unpinned). An Error for a negative index or one past the host's devices.
Expected<std::vector<int>> spread_devices(const Backend& backend, std::vector<int> given);
/// Each device's pinning variables (an empty DeviceEnv each where the target does not pin).
Expected<std::vector<DeviceEnv>> device_pins(const Target& target, const std::vector<int>& devices);

}  // namespace kfab
