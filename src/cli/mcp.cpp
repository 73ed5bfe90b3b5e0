#include "cli/mcp.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/target.h"
#include "cli/commands.h"
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
  const json task = {{"type", "string"}, {"description", "a task folder (task.toml) or a KernelBench-format .py file"}};
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
       {"inputSchema", schema({{"task", task}, {"candidate", candidate}, {"source", source}, {"filename", filename}, {"target", target}},
                              {"task"})}},
      {{"name", "profile"},
       {"description", "As evaluate, then Nsight Compute metrics per kernel of the first tuning shape (cuda): duration, DRAM and "
                       "SM throughput, occupancy, registers, shared memory, L1/L2 hit rates, top warp stalls."},
       {"inputSchema", schema({{"task", task}, {"candidate", candidate}, {"source", source}, {"filename", filename}, {"target", target}},
                              {"task"})}},
      {{"name", "history"},
       {"description", "The recorded evaluations of a task (by name), newest first: disposition, speedup, target, candidate."},
       {"inputSchema", schema({{"task", {{"type", "string"}, {"description", "the task's name"}}},
                               {"limit", {{"type", "integer"}, {"minimum", 1}, {"maximum", 1000}}}},
                              {"task"})}},
      {{"name", "best"},
       {"description", "The fastest candidate that passed for a task (by name), with its source."},
       {"inputSchema", schema({{"task", {{"type", "string"}, {"description", "the task's name"}}},
                               {"target", target}},
                              {"task"})}},
  });
}

struct ToolError {
  std::string message;
};

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
  try {
    return json::parse(r->output);
  } catch (const json::exception&) {
    throw ToolError{"kfab printed no JSON (" + r->status.describe() + "): " + printable(r->output, 2000)};
  }
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

json evaluate(const json& a, bool profile) {
  std::vector<std::string> args = {"eval", arg(a, "task"), candidate_file(a), "--quiet", "--no-heldout"};
  if (const std::string t = arg(a, "target", false); !t.empty()) args.insert(args.end(), {"--target", t});
  if (profile) args.push_back("--profile");
  return run_kfab(args, 3600);
}

json describe(const json& a) {
  const fs::path task = arg(a, "task");
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
  return out;
}

std::unique_ptr<Store> open_store() {
  auto s = Store::open(Store::default_path());
  if (!s) throw ToolError{s.error().message};
  return std::move(*s);
}

json history(const json& a, bool best_only) {
  const std::string task = arg(a, "task");
  const int limit = a.contains("limit") && a["limit"].is_number_integer() ? std::clamp(a["limit"].get<int>(), 1, 1000) : 50;
  auto store = open_store();
  auto rows = store->task_evaluations(task, best_only ? 100000 : limit);
  if (!rows) throw ToolError{rows.error().message};
  json list = json::array();
  const std::string target = best_only ? arg(a, "target", false) : "";
  const Store::TaskEvaluation* best = nullptr;
  for (const auto& r : *rows) {
    if (best_only) {
      if (r.row.disposition != "passed" || !r.row.speedup || (!target.empty() && r.row.target != target)) continue;
      if (best == nullptr || *r.row.speedup > *best->row.speedup) best = &r;
      continue;
    }
    list.push_back({{"evaluation", r.row.id}, {"candidate", r.candidate_path}, {"candidate_hash", r.row.candidate_hash},
                    {"dsl", r.dsl}, {"target", r.row.target}, {"disposition", r.row.disposition},
                    {"speedup", r.row.speedup ? json(*r.row.speedup) : json()}, {"at", r.row.created_at}});
  }
  if (!best_only) return {{"task", task}, {"evaluations", list}};
  if (best == nullptr) return {{"task", task}, {"best", nullptr}, {"why", "no passed evaluation of this task is recorded"}};
  auto src = store->candidate_source(best->row.candidate_hash);
  return {{"task", task},
          {"best", {{"evaluation", best->row.id}, {"candidate", best->candidate_path}, {"candidate_hash", best->row.candidate_hash},
                    {"dsl", best->dsl}, {"target", best->row.target}, {"speedup", *best->row.speedup}, {"at", best->row.created_at},
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
  if (name == "list_tasks") return list_tasks(a);
  if (name == "describe_task") return describe(a);
  if (name == "evaluate") return evaluate(a, false);
  if (name == "profile") return evaluate(a, true);
  if (name == "history") return history(a, false);
  if (name == "best") return history(a, true);
  throw ToolError{"no tool named " + name};
}

json error_reply(const json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

}  // namespace

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
      } catch (const ToolError& e) {
        send({{"jsonrpc", "2.0"}, {"id", id}, {"result", text_result(withhold_heldout(json{{"error", e.message}}), true)}});
      } catch (const std::exception& e) {
        send({{"jsonrpc", "2.0"}, {"id", id}, {"result", text_result(withhold_heldout(json{{"error", e.what()}}), true)}});
      }
    } else {
      send(error_reply(id, kMethodNotFound, "method not found: " + method));
    }
  }
  return 0;
}

}  // namespace kfab::cli
