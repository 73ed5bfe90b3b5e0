#include "cli/mcp.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <iostream>
#include <regex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "backends/target.h"
#include "cli/commands.h"
#include "core/discover.h"
#include "core/hash.h"
#include "core/paths.h"
#include "core/text.h"
#include "core/process.h"
#include "core/task.h"
#include "eval/torch_harness.h"
#include "store/store.h"

namespace kfab::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

// JSON-RPC 2.0 error codes.
constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;

json schema(json properties, std::vector<std::string> required) {
  return {{"type", "object"}, {"properties", std::move(properties)}, {"required", std::move(required)},
          {"additionalProperties", false}};
}

json tools() {
  const json task = {{"type", "string"},
                     {"description", "the task: its folder (task.toml) or KernelBench-format .py file, or its name (as list_tasks "
                                     "shows it, found under ./tasks)"}};
  json names = json::array();
  std::string suffixes;
  for (const Target* t : targets()) {
    names.push_back(t->name);
    suffixes += (suffixes.empty() ? "" : ", ") + std::string(t->suffix()) + " " + std::string(t->name);
  }
  const json candidate = {{"type", "string"},
                          {"description", "path of the candidate file (" + suffixes + "; .py for KernelBench tasks)"}};
  const json source = {{"type", "string"}, {"description", "the candidate's source, instead of a path (with filename)"}};
  const json filename = {{"type", "string"}, {"description", "the file name for `source`, whose suffix picks the kind (e.g. my_kernel.cu)"}};
  const json target = {{"type", "string"}, {"enum", names}, {"description", "default: the best target present for the file"}};
  const json seeds = {{"type", "integer"}, {"minimum", 1}, {"maximum", 100}, {"description", "seeds per shape (default 5)"}};
  const json min_time = {{"type", "number"}, {"minimum", 0}, {"maximum", 60},
                         {"description", "seconds of timed calls per shape, at least (default: cpu 0.5, cuda/opencl 0.05)"}};
  const json eval_props = {{"task", task},   {"candidate", candidate}, {"source", source},
                           {"filename", filename}, {"target", target}, {"seeds", seeds}, {"min_time", min_time}};
  return json::array({
      {{"name", "list_tasks"},
       {"description", "The tasks under a folder (native task.toml folders and KernelBench-format files)."},
       {"inputSchema", schema({{"path", {{"type", "string"}, {"description", "default: tasks"}}}}, {})}},
      {{"name", "describe_task"},
       {"description", "What a task computes: its manifest or KernelBench file (held-out shapes removed), its reference source, "
                       "tensors, tuning shapes, tolerance and cost; the candidate ABI (include/kfab/candidate.h)."},
       {"inputSchema", schema({{"task", task}}, {"task"})}},
      {{"name", "evaluate"},
       {"description", "Verify (5 seeds on every tuning shape) and time a candidate against the task's baseline: the verdict of "
                       "`kfab eval --json`, held-out shapes left out. The evaluation is recorded in kfab's store."},
       {"inputSchema", schema(eval_props, {"task"})}},
      {{"name", "check_heldout"},
       {"description", "Whether a candidate is also correct on the task's held-out shapes, which no tool shows: pass or fail per "
                       "held-out shape (by index, sizes withheld), after the same check on the tuning shapes. A kernel that "
                       "only works for the tuning sizes (a tail dropped, a size built in) fails here. Recorded like evaluate."},
       {"inputSchema", schema(eval_props, {"task"})}},
      {{"name", "profile"},
       {"description", "As evaluate, then the candidate's profile: on cuda Nsight Compute's metrics per kernel of the first tuning "
                       "shape (duration, DRAM and SM throughput, occupancy, registers, shared memory, L1/L2 hit rates, top warp "
                       "stalls); on the cpu perf counters per timed call (cycles, instructions, cache references and misses, "
                       "branch misses, task clock, context switches, page faults) where the machine has them, and why not where "
                       "it has none. A target without a profiler is a tool error."},
       {"inputSchema", schema(eval_props, {"task"})}},
      {{"name", "compare"},
       {"description", "Two candidates verified on the tuning shapes, then timed interleaved in one run (a call of a, of b and "
                       "of the task's baseline, the order rotating): a_over_b is how much faster a is than b, from the "
                       "interleaved pairs, with its 95% interval and whether the measurement was noisy. Use it to decide "
                       "between two versions whose speedups, measured in separate evaluations, are close. Not recorded."},
       {"inputSchema", schema({{"task", task},
                               {"a", {{"type", "string"}, {"description", "path of a candidate file"}}},
                               {"b", {{"type", "string"}, {"description", "path of the candidate it is compared with"}}},
                               {"target", target},
                               {"seeds", seeds},
                               {"min_time", min_time}},
                              {"task", "a", "b"})}},
      {{"name", "history"},
       {"description", "The recorded evaluations of a task, newest first: disposition, speedup, target, candidate, the "
                       "measurement's noise (noisy, and the speedup's 95% interval from interleaved pairs), and whether its "
                       "held-out shapes were checked and passed (heldout: passed and total, or null when not checked)."},
       {"inputSchema", schema({{"task", task}, {"limit", {{"type", "integer"}, {"minimum", 1}, {"maximum", 1000}}}}, {"task"})}},
      {{"name", "best"},
       {"description", "The fastest candidate that passed for a task, with its source, preferring one that also passed its "
                       "held-out shapes (check_heldout): `heldout` says which it is. A source evaluated more than once is "
                       "judged by its runs combined (the median speedup, over the runs not flagged noisy where there are "
                       "any): `speedup_runs` says how many and their range."},
       {"inputSchema", schema({{"task", task}, {"target", {{"type", "string"}, {"enum", names}, {"description", "only this target's evaluations (default: any)"}}}},
                              {"task"})}},
  });
}

struct ToolError {
  std::string message;
  std::string hint;
};

/// The tool's arguments checked against its inputSchema: every name one it declares, every value of its
/// type (string, integer, number, boolean), within its minimum, maximum and enum; every required one given.
void check_arguments(const std::string& tool, const json& a) {
  const json all = tools();
  const auto it = std::find_if(all.begin(), all.end(), [&](const json& t) { return t["name"] == tool; });
  if (it == all.end()) throw ToolError{"no tool named " + tool, "tools/list gives the tools"};
  const json& props = (*it)["inputSchema"]["properties"];
  std::string accepted;
  for (const auto& [k, v] : props.items()) accepted += (accepted.empty() ? "" : ", ") + k;
  for (const auto& [k, v] : a.items()) {
    if (!props.contains(k)) throw ToolError{fmt::format("{} takes no argument {}", tool, k), "its arguments: " + accepted};
    const json& p = props[k];
    const std::string type = p.value("type", "");
    const bool ok = type == "string" ? v.is_string() : type == "integer" ? v.is_number_integer() : type == "number" ? v.is_number()
                  : type == "boolean" ? v.is_boolean() : true;
    if (!ok) throw ToolError{fmt::format("argument {} of {} must be {} {}, not {}", k, tool, type == "integer" ? "an" : "a", type, v.dump())};
    if (p.contains("enum") && std::find(p["enum"].begin(), p["enum"].end(), v) == p["enum"].end())
      throw ToolError{fmt::format("argument {} of {} is {}: one of {} is accepted", k, tool, v.dump(), p["enum"].dump())};
    if (v.is_number() && ((p.contains("minimum") && v.get<double>() < p["minimum"].get<double>()) ||
                          (p.contains("maximum") && v.get<double>() > p["maximum"].get<double>())))
      throw ToolError{fmt::format("argument {} of {} is {}: from {} to {} is accepted", k, tool, v.dump(), p.value("minimum", json()).dump(),
                                  p.value("maximum", json()).dump())};
  }
  for (const auto& r : (*it)["inputSchema"]["required"])
    if (!a.contains(r.get<std::string>())) throw ToolError{fmt::format("{} needs the argument {}", tool, r.get<std::string>())};
}

json text_result(const json& data, bool is_error = false) {
  return {{"content", json::array({{{"type", "text"}, {"text", data.is_string() ? data.get<std::string>() : data.dump(2)}}})},
          {"structuredContent", data.is_object() ? data : json{{"text", data}}},
          {"isError", is_error}};
}

/// Runs kfab itself with `args` (and --json); the parsed JSON it printed.
json run_kfab(const std::vector<std::string>& args, double timeout_s) {
  std::vector<std::string> argv = {(self_dir() / "kfab").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--json");
  auto r = run_command({"/bin/sh", "-c", [&] {
                          std::string cmd = "exec";
                          for (const auto& a : argv) {
                            std::string q = "'";
                            for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
                            cmd += " " + q + "'";
                          }
                          return cmd + " 2>/dev/null";
                        }()},
                       timeout_s);
  if (!r) throw ToolError{r.error().message};
  if (r->timed_out) throw ToolError{"kfab did not finish within " + std::to_string(static_cast<int>(timeout_s)) + " s"};
  json j;
  try {
    j = json::parse(r->output);
  } catch (const json::exception&) {
    throw ToolError{"kfab printed no JSON (" + r->status.describe() + "): " + printable(r->output, 2000)};
  }
  // kfab's refusal of the command (a missing file, an unknown target): {"error", "hint"}, not a verdict
  if (j.is_object() && j.contains("error") && j["error"].is_string() && !j.contains("disposition"))
    throw ToolError{j["error"].get<std::string>(), j.value("hint", std::string())};
  return j;
}

/// A task argument as a path: an existing file or folder as it is, else the task of that name under ./tasks
/// (a native task's manifest name, a KernelBench file's stem).
std::string task_path(const json& a) {
  const std::string t = a.at("task").get<std::string>();
  std::error_code ec;
  if (fs::exists(t, ec)) return t;
  if (t.find('/') == std::string::npos && fs::is_directory("tasks", ec))
    for (const auto& e : discover_tasks("tasks")) {
      const std::string name = e.task ? e.task->name : e.path.stem().string();
      if (name == t) return e.path.string();
    }
  throw ToolError{"no task " + t + ": neither a path nor the name of a task under ./tasks", "list_tasks shows the tasks and their paths"};
}

/// A task argument as the name the store records: a path's task name, else the argument as it is.
std::string task_name(const json& a) {
  const std::string t = a.at("task").get<std::string>();
  std::error_code ec;
  if (!fs::exists(t, ec)) return t;
  auto lt = open_task(t);
  if (!lt) throw ToolError{lt.error().message, lt.error().hint};
  return lt->task.name;
}

std::string arg(const json& a, const char* key, bool required = true) {
  if (!a.contains(key)) {
    if (required) throw ToolError{std::string("missing argument: ") + key};
    return {};
  }
  if (!a[key].is_string()) throw ToolError{std::string("argument ") + key + " must be a string"};
  return a[key].get<std::string>();
}

/// The candidate file of an evaluate call: `candidate`, or `source` written under kfab's data folder.
std::string candidate_file(const json& a) {
  std::string path = arg(a, "candidate", false);
  const std::string source = arg(a, "source", false);
  if (!path.empty() == !source.empty()) throw ToolError{"give either candidate (a path) or source with filename"};
  if (!path.empty()) return path;
  std::string name = fs::path(arg(a, "filename")).filename().string();
  if (name.empty() || name == "." || name == "..") throw ToolError{"filename must name a file, e.g. kernel.cu"};
  const fs::path dir = data_dir() / "mcp" / hash_hex(source).substr(0, 16);
  const fs::path file = dir / name;
  if (auto ok = write_file_atomic(file, source); !ok) throw ToolError{ok.error().message};
  return file.string();
}

enum class Check { Tuning, Profile, HeldOut };

json evaluate(const json& a, Check check) {
  std::vector<std::string> args = {"eval", task_path(a), candidate_file(a), "--quiet"};
  if (check != Check::HeldOut) args.push_back("--no-heldout");
  if (const std::string t = arg(a, "target", false); !t.empty()) args.insert(args.end(), {"--target", t});
  if (a.contains("seeds")) args.insert(args.end(), {"--seeds", std::to_string(a["seeds"].get<int>())});
  if (a.contains("min_time")) args.insert(args.end(), {"--min-time", fmt::format("{}", a["min_time"].get<double>())});
  if (check == Check::Profile) args.push_back("--profile");
  json v = run_kfab(args, 3600);
  if (check == Check::Profile && v.contains("profile") && v["profile"].is_object() && v["profile"].contains("error"))
    throw ToolError{"no profile: " + v["profile"]["error"].get<std::string>(),
                    "the verdict without it: evaluate; " + v.value("detail", std::string())};
  if (check != Check::HeldOut) return v;
  // pass or fail per held-out shape, by index: the sizes (and the errors, which name elements) stay here
  json heldout = json::array(), tuning = json::array();
  int passed = 0, index = 0;
  for (const auto& sh : v.value("shapes", json::array())) {
    const bool ok = sh.value("correct", false);
    if (!sh.value("heldout", false)) {
      tuning.push_back({{"correct", ok}});
      continue;
    }
    heldout.push_back({{"index", index++}, {"correct", ok}});
    passed += ok;
  }
  return {{"disposition", v.value("disposition", "")},
          {"heldout_passed", !heldout.empty() && passed == static_cast<int>(heldout.size())},
          {"heldout", heldout},
          {"passed", passed},
          {"total", heldout.size()},
          {"tuning_shapes", tuning},
          {"evaluation", v.contains("store") && v["store"].is_object() ? v["store"].value("evaluation", json()) : json()},  // the store's id
          {"detail", heldout.empty() ? "the task has no held-out shapes" : v.value("disposition", "") == "passed"
                                                                                ? "correct on every tuning and held-out shape"
                                                                                : "not correct on every shape: fix it, then evaluate again"}};
}

json compare(const json& a) {
  std::vector<std::string> args = {"compare", task_path(a), arg(a, "a"), arg(a, "b"), "--quiet"};
  if (const std::string t = arg(a, "target", false); !t.empty()) args.insert(args.end(), {"--target", t});
  if (a.contains("seeds")) args.insert(args.end(), {"--seeds", std::to_string(a["seeds"].get<int>())});
  if (a.contains("min_time")) args.insert(args.end(), {"--min-time", fmt::format("{}", a["min_time"].get<double>())});
  return run_kfab(args, 3600);
}

/// What an agent needs to design a kernel for `target` beyond the task: how a candidate is built, where its
/// buffers live, how it is timed, and the machine (its CPU; on a GPU target the device kfab found; the
/// peaks kfab measured, where it has: the first evaluation on a target measures them).
json target_facts(const Target& t, bool kernelbench) {
  json f = {{"suffix", t.suffix()}, {"dsl", t.dsl}};
  const auto backend = t.make_backend();
  if (backend && backend->probe() > 0) {
    f["build"] = backend->build_command("candidate" + t.suffix());
    f["device"] = backend->describe();
  } else {
    f["available"] = false;
  }
  f["buffers"] = kernelbench ? "torch tensors as get_inputs() makes them and the Model's parameters, contiguous; outputs torch.empty "
                               "(the caching allocator's alignment: 512 bytes on cuda, 64 on the cpu)"
                 : t.on_host        ? "host memory, each tensor 64-byte aligned, contiguous row-major (strides null)"
                 : t.name == "cuda" ? "device memory, one cuMemAlloc per tensor (256-byte aligned), contiguous row-major"
                                    : "an OpenCL buffer per tensor (data is its cl_mem), contiguous row-major";
  const bool cpu = t.on_host;
  f["protocol"] = {{"seeds", 5},
                   {"warmup_calls", 3},
                   {"min_calls", cpu ? 50 : 100},
                   {"min_time_s", cpu ? 0.5 : 0.05},
                   {"flush", t.flush},
                   {"timer", t.timer},
                   {"timed_inputs", "the timing seed's inputs, four elements changed anew before each timed call; sampled calls "
                                    "checked against the reference"},
                   {"outputs", "poisoned (NaN) before each verified call: every element must be written"},
                   {"speedup", "the baseline's median time over the candidate's, geometric mean over the tuning shapes"}};
  return f;
}

/// The host: CPU model, logical CPUs, instruction-set extensions a kernel may use, cache sizes, and the
/// peaks kfab measured and cached (copy bandwidth), where it has.
json host_facts() {
  json h = json::object();
  if (auto info = read_file("/proc/cpuinfo")) {
    std::smatch m;
    if (std::regex_search(*info, m, std::regex(R"(model name\s*:\s*([^\n]+))"))) h["cpu"] = m[1].str();
    if (std::regex_search(*info, m, std::regex(R"(\nflags\s*:\s*([^\n]+))"))) {
      const std::string flags = " " + m[1].str() + " ";
      json isa = json::array();
      for (const char* x : {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
                            "avx_vnni", "amx_tile", "amx_bf16"})
        if (flags.find(std::string(" ") + x + " ") != std::string::npos) isa.push_back(x);
      h["isa"] = isa;
    }
  }
  h["logical_cpus"] = std::thread::hardware_concurrency();
  json caches = json::array();
  for (int i = 0; i < 8; ++i) {
    const fs::path d = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}", i);
    auto level = read_file(d / "level"), type = read_file(d / "type"), size = read_file(d / "size");
    if (!level || !type || !size) continue;
    auto trim = [](std::string v) {
      while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.pop_back();
      return v;
    };
    caches.push_back(fmt::format("L{} {} {}", trim(*level), trim(*type), trim(*size)));
  }
  h["caches"] = caches;
  json measured = json::object();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache_dir() / "machine", ec))
    if (e.path().extension() == ".json")
      if (auto text = read_file(e.path())) try {
          measured[e.path().stem().string()] = json::parse(*text);
        } catch (const json::exception&) {
        }
  h["measured"] = measured.empty() ? json("nothing yet: the first evaluation on a target measures its peaks") : measured;
  return h;
}

json describe(const json& a) {
  const fs::path task = task_path(a);
  json out;
  std::error_code ec;
  auto lt = open_task(task);
  if (!lt) throw ToolError{lt.error().to_string()};
  if (lt->kernelbench()) {
    auto text = read_file(task);
    if (!text) throw ToolError{text.error().message};
    // Held-out shapes are never shown to a proposer.
    out = {{"format", "kernelbench"}, {"task", task.string()},
           {"source", withhold(*text, "KFAB_HELDOUT")}};
  } else {
    const Task* t = &lt->task;
    auto manifest = read_file(t->manifest);
    auto reference = read_file(t->reference);
    json ins = json::array(), outs = json::array();
    for (const auto& x : t->inputs) ins.push_back({{"name", x.name}, {"dtype", dtype_name(x.dtype)}, {"shape", x.shape}});
    for (const auto& x : t->outputs) outs.push_back({{"name", x.name}, {"dtype", dtype_name(x.dtype)}, {"shape", x.shape}});
    out = {{"format", "native"}, {"name", t->name}, {"summary", t->summary}, {"op_class", t->op_class},
           {"inputs", ins}, {"outputs", outs}, {"tune", t->tune}, {"tune_gpu", t->tune_gpu},
           {"cost", {{"flops", t->cost_flops}, {"bytes", t->cost_bytes}}},
           {"manifest", manifest ? withhold(*manifest, "heldout") : ""},
           {"reference_source", reference ? *reference : ""}};
  }
  if (auto abi = read_file(abi_include_dir() / "kfab/candidate.h")) out["abi"] = *abi;
  // how a candidate is built, where its buffers live and how it is timed, per target that takes the task
  json per_target = json::object();
  for (const Target* t : targets())
    if (!lt->kernelbench() || !t->torch_device.empty()) per_target[std::string(t->name)] = target_facts(*t, lt->kernelbench());
  out["targets"] = per_target;
  out["host"] = host_facts();
  return out;
}

std::unique_ptr<Store> open_store() {
  auto s = Store::open(Store::default_path());
  if (!s) throw ToolError{s.error().message};
  return std::move(*s);
}

/// Whether an evaluation's verdict (its JSON) checked held-out shapes: {passed, total}, or null when it did not.
json heldout_status(const std::string& verdict) {
  try {
    const json v = json::parse(verdict);
    int passed = 0, total = 0;
    for (const auto& sh : v.value("shapes", json::array()))
      if (sh.value("heldout", false)) ++total, passed += sh.value("correct", false);
    return total == 0 ? json() : json{{"passed", passed}, {"total", total}};
  } catch (const json::exception&) {
    return json();
  }
}

/// A verdict's noise (eval/noise.h): {noisy, speedup_ci95}, or null for a verdict from before it.
json noise_of(const std::string& verdict) {
  try {
    const json v = json::parse(verdict);
    if (!v.contains("noise") || !v["noise"].is_object()) return json();
    json n = {{"noisy", v["noise"].value("noisy", false)}};
    if (v["noise"].contains("speedup_ci95")) n["speedup_ci95"] = v["noise"]["speedup_ci95"];
    return n;
  } catch (const json::exception&) {
    return json();
  }
}

/// The runs of one source on one target that passed, combined: the median of their speedups (in logs),
/// over the runs not flagged noisy where there are any; one lucky run is not the source's figure.
struct Combined {
  const Store::TaskEvaluation* latest = nullptr;
  std::vector<double> all, quiet;
  double speedup() const {
    std::vector<double> logs;
    for (double s : quiet.empty() ? all : quiet) logs.push_back(std::log(s));
    std::sort(logs.begin(), logs.end());
    const size_t n = logs.size();
    return std::exp(n % 2 ? logs[n / 2] : 0.5 * (logs[n / 2 - 1] + logs[n / 2]));
  }
  json to_json() const {
    const auto [lo, hi] = std::minmax_element(all.begin(), all.end());
    return {{"runs", all.size()}, {"quiet_runs", quiet.size()}, {"min", *lo}, {"max", *hi},
            {"how", quiet.empty() || quiet.size() == all.size() ? "the median of the runs' speedups"
                                                                 : "the median of the runs not flagged noisy"}};
  }
};

json history(const json& a, bool best_only) {
  const std::string task = task_name(a);
  const int limit = a.contains("limit") && a["limit"].is_number_integer() ? std::clamp(a["limit"].get<int>(), 1, 1000) : 50;
  auto store = open_store();
  auto rows = store->task_evaluations(task, best_only ? 100000 : limit);
  if (!rows) throw ToolError{rows.error().message};
  json list = json::array();
  const std::string target = best_only ? arg(a, "target", false) : "";
  if (!best_only) {
    for (const auto& r : *rows)
      list.push_back({{"evaluation", r.row.id}, {"candidate", r.candidate_path}, {"candidate_hash", r.row.candidate_hash},
                      {"dsl", r.dsl}, {"target", r.row.target}, {"disposition", r.row.disposition},
                      {"speedup", r.row.speedup ? json(*r.row.speedup) : json()}, {"noise", noise_of(r.verdict)},
                      {"heldout", heldout_status(r.verdict)}, {"at", r.row.created_at}});
    return {{"task", task}, {"evaluations", list}};
  }
  // best: the fastest source that passed, by its runs combined, among those that also passed held-out
  // shapes where any did; a source that some evaluation found wrong on a held-out shape is never best
  std::vector<std::string> failed_heldout;
  std::map<std::string, bool> heldout_passed;  // by source
  for (const auto& r : *rows)
    if (const json held = heldout_status(r.verdict); held.is_object()) {
      if (held["passed"] != held["total"]) failed_heldout.push_back(r.row.candidate_hash);
      else heldout_passed[r.row.candidate_hash] = true;
    }
  std::map<std::pair<std::string, std::string>, Combined> sources;  // (hash, target)
  for (const auto& r : *rows) {  // newest first
    if (r.row.disposition != "passed" || !r.row.speedup || *r.row.speedup <= 0 || (!target.empty() && r.row.target != target) ||
        std::find(failed_heldout.begin(), failed_heldout.end(), r.row.candidate_hash) != failed_heldout.end())
      continue;
    Combined& c = sources[{r.row.candidate_hash, r.row.target}];
    if (c.latest == nullptr) c.latest = &r;
    c.all.push_back(*r.row.speedup);
    if (const json n = noise_of(r.verdict); !n.is_object() || !n.value("noisy", false)) c.quiet.push_back(*r.row.speedup);
  }
  const Combined* best = nullptr;
  bool best_heldout = false;
  for (const auto& [key, c] : sources) {
    const bool h = heldout_passed.count(key.first) > 0;
    if (best == nullptr || (h && !best_heldout) || (h == best_heldout && c.speedup() > best->speedup())) best = &c, best_heldout = h;
  }
  if (best == nullptr) return {{"task", task}, {"best", nullptr}, {"why", "no passed evaluation of this task is recorded"}};
  const Store::TaskEvaluation& r = *best->latest;
  auto src = store->candidate_source(r.row.candidate_hash);
  return {{"task", task},
          {"best", {{"evaluation", r.row.id}, {"candidate", r.candidate_path}, {"candidate_hash", r.row.candidate_hash},
                    {"dsl", r.dsl}, {"target", r.row.target}, {"speedup", best->speedup()}, {"speedup_runs", best->to_json()},
                    {"at", r.row.created_at}, {"heldout", best_heldout ? "passed" : "not checked: check_heldout checks it"},
                    {"source", src ? *src : ""}}}};
}

/// `kfab tasks --json` without the held-out shapes.
json list_tasks(const json& a) {
  json out = run_kfab({"tasks", a.contains("path") ? arg(a, "path") : "tasks"}, 120);
  if (out.contains("tasks") && out["tasks"].is_array())
    for (auto& t : out["tasks"])
      if (t.is_object()) t.erase("heldout");
  return out;
}

/// Held-out shapes are never shown to an agent: every string of a tool's result (a broken manifest's
/// message included, which names the shape entry it is about) has a held-out binding's sizes withheld.
json withhold_heldout(json j) {
  if (j.is_string()) {
    static const std::regex binding(R"((shapes\.heldout(\[\d+\])?) \{[^}]*\})");
    return std::regex_replace(j.get<std::string>(), binding, "$1 {withheld}");
  }
  if (j.is_object() || j.is_array())
    for (auto& v : j) v = withhold_heldout(std::move(v));
  return j;
}

json call_tool(const std::string& name, const json& a) {
  check_arguments(name, a);
  if (name == "list_tasks") return list_tasks(a);
  if (name == "describe_task") return describe(a);
  if (name == "evaluate") return evaluate(a, Check::Tuning);
  if (name == "check_heldout") return evaluate(a, Check::HeldOut);
  if (name == "profile") return evaluate(a, Check::Profile);
  if (name == "compare") return compare(a);
  if (name == "history") return history(a, false);
  if (name == "best") return history(a, true);
  throw ToolError{"no tool named " + name};
}

json error_reply(const json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

}  // namespace

std::string agent_brief(const std::string& kfab_path) {
  std::string tools_text;
  for (const auto& t : tools()) {
    std::string args;
    for (const auto& [k, v] : t["inputSchema"]["properties"].items()) args += (args.empty() ? "" : ", ") + k;
    tools_text += fmt::format("- `{}` ({}): {}\n", t["name"].get<std::string>(), args, t["description"].get<std::string>());
  }
  return fmt::format(R"(# Writing kernels with kfab

kfab verifies and times compute kernels against a reference computation. You drive it through its MCP
server, `{0} mcp` (JSON-RPC on stdio); written by `kfab mcp --brief`, for kfab {1}.

## The loop

1. `list_tasks`, then `describe_task`: what the task computes, its tensors, tuning shapes, tolerance and
   cost, the reference's source, and the candidate ABI (`kfab_run` in `kfab/candidate.h`).
2. Write a candidate: a `.cpp` file (cpu target), `.cu` (cuda), `.cl.cpp` (opencl), or for a KernelBench
   task a `.py` file with `run(inputs, outputs)` or a `ModelNew`. Pass it as `candidate` (a path) or as
   `source` with `filename`.
3. `evaluate` it: the verdict (passed, incorrect, compile_failed, runtime_failed, crashed, timeout,
   rejected) with per-shape errors, timings and the speedup over the baseline. Fix what it says and
   evaluate again.
4. Before you call a kernel done, `check_heldout` it: the task has held-out shapes you are never shown
   (odd sizes: a tail not a multiple of your vector width, a size you built in). It answers pass or
   fail per held-out shape.
5. On cuda, `profile` gives Nsight Compute's counters per kernel; `history` and `best` read what is
   recorded (`best` prefers a kernel that passed its held-out shapes).

## What kfab holds a candidate to

- Correctness: every output within the task's tolerance (atol + rtol * |reference|) on several seeds per
  shape; a NaN or infinity where the reference has none fails. Outputs are poisoned before each call, so
  an element you do not write fails.
- Timing: the median of many calls after warm-up, caches flushed before each timed call, the inputs
  changed between calls; the speedup is the baseline's median over yours. A kernel slower than the
  baseline is reported as such: keep the baseline then.
- Isolation: a candidate runs in a sandboxed process (no network, writes confined); on KernelBench
  tasks it may not call what the task forbids (the operation it replaces).
- Errors: every tool failure comes back with `isError: true` and {{"error", "hint"}}; arguments a tool
  does not take are refused.

## Tools

{2}
## MCP configuration

For hosts that read an `mcpServers` map (Claude Code's `.mcp.json`, Claude Desktop, Cursor's
`.cursor/mcp.json`):

```json
{{"mcpServers": {{"kfab": {{"command": "{0}", "args": ["mcp"]}}}}}}
```

For Codex (`~/.codex/config.toml`):

```toml
[mcp_servers.kfab]
command = "{0}"
args = ["mcp"]
```
)",
                     kfab_path, kVersion, tools_text);
}

int serve_mcp(std::istream& in, std::ostream& out) {
  std::string line;
  auto send = [&](const json& j) { out << dump_json(j) << "\n" << std::flush; };
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json msg;
    try {
      msg = json::parse(line);
    } catch (const json::exception& e) {
      send(error_reply(nullptr, kParseError, std::string("parse error: ") + e.what()));
      continue;
    }
    if (!msg.is_object() || msg.value("jsonrpc", "") != "2.0" || !msg.contains("method") || !msg["method"].is_string()) {
      if (msg.is_object() && !msg.contains("method") && (msg.contains("result") || msg.contains("error"))) continue;  // a client's reply
      send(error_reply(msg.is_object() && msg.contains("id") ? msg["id"] : json(), kInvalidRequest, "not a JSON-RPC 2.0 request"));
      continue;
    }
    const std::string method = msg["method"];
    if (!msg.contains("id")) continue;  // notifications: initialized, cancelled
    const json id = msg["id"];
    const json params = msg.value("params", json::object());
    if (method == "initialize") {
      std::string version = params.value("protocolVersion", std::string(kVersions[1]));
      if (std::find(std::begin(kVersions), std::end(kVersions), version) == std::end(kVersions)) version = kVersions[1];
      send({{"jsonrpc", "2.0"}, {"id", id},
            {"result", {{"protocolVersion", version},
                        {"capabilities", {{"tools", {{"listChanged", false}}}}},
                        {"serverInfo", {{"name", "kfab"}, {"version", std::string(kVersion)}}},
                        {"instructions", "kfab verifies and times compute kernels. describe_task shows what to write and the ABI; "
                                         "evaluate returns the verdict (passed, incorrect, compile_failed, ...) with per-shape "
                                         "errors, timings and speedup; history and best read what is recorded."}}}});
    } else if (method == "ping") {
      send({{"jsonrpc", "2.0"}, {"id", id}, {"result", json::object()}});
    } else if (method == "tools/list") {
      send({{"jsonrpc", "2.0"}, {"id", id}, {"result", {{"tools", tools()}}}});
    } else if (method == "tools/call") {
      if (!params.contains("name") || !params["name"].is_string()) {
        send(error_reply(id, kInvalidParams, "tools/call needs params.name"));
        continue;
      }
      const json args = params.value("arguments", json::object());
      if (!args.is_object()) {
        send(error_reply(id, kInvalidParams, "arguments must be an object"));
        continue;
      }
      try {
        send({{"jsonrpc", "2.0"}, {"id", id}, {"result", text_result(withhold_heldout(call_tool(params["name"], args)))}});
      } catch (const ToolError& e) {  // every failure of a tool: isError, {"error", "hint"}
        send({{"jsonrpc", "2.0"}, {"id", id}, {"result", text_result(withhold_heldout(json{{"error", e.message}, {"hint", e.hint}}), true)}});
      } catch (const std::exception& e) {
        send({{"jsonrpc", "2.0"}, {"id", id}, {"result", text_result(withhold_heldout(json{{"error", e.what()}, {"hint", ""}}), true)}});
      }
    } else {
      send(error_reply(id, kMethodNotFound, "method not found: " + method));
    }
  }
  return 0;
}

}  // namespace kfab::cli
