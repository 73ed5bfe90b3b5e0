// `kfab mcp`: a whole MCP session over stdio (initialize, tools/list, tools/call evaluate, history,
// best, describe_task), with the errors a client can cause.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "harness.h"

namespace kfab::test {

namespace {

/// Runs `kfab mcp` with the given lines on stdin; the JSON replies, one per line.
std::vector<nlohmann::json> session(const std::vector<nlohmann::json>& messages, const std::string& raw_extra = "") {
  const auto in = scratch() / "mcp_in.jsonl";
  std::string text;
  for (const auto& m : messages) text += m.dump() + "\n";
  text += raw_extra;
  EXPECT_TRUE(write_file_atomic(in, text).has_value());
  const std::string cmd = "KFAB_CACHE_DIR=" + quote(std::string(KFAB_BINARY) + ".test-cache") + " KFAB_DATA_DIR=" +
                          quote((scratch() / "mcp-data").string()) + " exec " + quote(KFAB_BINARY) + " mcp <" +
                          quote(in.string()) + " 2>/dev/null";
  auto r = run_command({"/bin/sh", "-c", cmd}, 600, KFAB_SOURCE_DIR);
  EXPECT_TRUE(r.has_value());
  std::vector<nlohmann::json> out;
  if (!r) return out;
  EXPECT_TRUE(r->status.ok()) << r->output;
  std::istringstream lines(r->output);
  std::string line;
  while (std::getline(lines, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

nlohmann::json request(int id, const std::string& method, nlohmann::json params = nlohmann::json::object()) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}};
}

nlohmann::json call(int id, const std::string& tool, nlohmann::json args) {
  return request(id, "tools/call", {{"name", tool}, {"arguments", args}});
}

}  // namespace

TEST(Mcp, AWholeSessionEvaluatesACandidateAndReadsItBack) {
  const std::string task = fixture("tasks/affine");
  auto replies = session({
      request(1, "initialize", {{"protocolVersion", "2025-06-18"}, {"capabilities", nlohmann::json::object()},
                                {"clientInfo", {{"name", "test"}, {"version", "1"}}}}),
      {{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}},
      request(2, "tools/list"),
      call(3, "describe_task", {{"task", task}}),
      call(4, "evaluate", {{"task", task}, {"candidate", fixture("tasks/affine/candidates/good.cpp")}, {"target", "cpu"}}),
      call(5, "evaluate", {{"task", task}, {"filename", "wrong.cpp"},
                           {"source", "#include <kfab/candidate.h>\nKFAB_EXPORT int kfab_run(const kfab_tensor*, int32_t, kfab_tensor*, int32_t, void*) { return 0; }\n"},
                           {"target", "cpu"}}),
      call(6, "history", {{"task", "affine"}}),
      call(7, "best", {{"task", "affine"}}),
      call(8, "evaluate", {{"task", task}}),
      request(9, "no/such/method"),
  }, "this is not json\n");
  ASSERT_EQ(replies.size(), 10u);  // the notification gets no reply
  EXPECT_EQ(replies[0]["id"], 1);
  EXPECT_EQ(replies[0]["result"]["protocolVersion"], "2025-06-18");
  EXPECT_EQ(replies[0]["result"]["serverInfo"]["name"], "kfab");
  std::vector<std::string> names;
  for (const auto& t : replies[1]["result"]["tools"]) names.push_back(t["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"list_tasks", "describe_task", "evaluate", "profile", "history", "best"}));
  const auto& desc = replies[2]["result"]["structuredContent"];
  EXPECT_EQ(desc["format"], "native");
  EXPECT_EQ(desc["manifest"].get<std::string>().find("heldout = ["), std::string::npos) << "held-out shapes leaked";
  EXPECT_NE(desc["abi"].get<std::string>().find("kfab_run"), std::string::npos);
  const auto& good = replies[3]["result"];
  EXPECT_FALSE(good["isError"].get<bool>());
  EXPECT_EQ(good["structuredContent"]["disposition"], "passed");
  for (const auto& s : good["structuredContent"]["shapes"]) EXPECT_FALSE(s["heldout"].get<bool>());
  EXPECT_EQ(replies[4]["result"]["structuredContent"]["disposition"], "incorrect");  // writes nothing: NaN poison stays
  const auto& hist = replies[5]["result"]["structuredContent"]["evaluations"];
  ASSERT_EQ(hist.size(), 2u);
  EXPECT_EQ(hist[0]["disposition"], "incorrect");
  EXPECT_EQ(hist[1]["disposition"], "passed");
  const auto& best = replies[6]["result"]["structuredContent"]["best"];
  EXPECT_GT(best.value("speedup", 0.0), 0.0);
  EXPECT_EQ(best.value("candidate", ""), fixture("tasks/affine/candidates/good.cpp"));
  EXPECT_NE(best["source"].get<std::string>().find("kfab_run"), std::string::npos);
  EXPECT_TRUE(replies[7]["result"]["isError"].get<bool>());  // neither candidate nor source
  EXPECT_EQ(replies[8]["error"]["code"], -32601);
  EXPECT_EQ(replies[9]["error"]["code"], -32700);
}

// Issue 20: no tool's result shows a held-out shape. Every tool the server lists is called, on a task
// whose held-out sizes are distinctive, and on one whose held-out entry is broken (its message quotes
// the entry); none of the replies may contain the sizes.
TEST(Mcp, NoToolResultContainsAHeldOutShape) {
  const std::string kHeldOut = "3141593";
  const auto suite = scratch() / "mcp-heldout";
  const auto task = suite / "heldout_affine", broken = suite / "heldout_broken";
  std::filesystem::create_directories(task);
  std::filesystem::create_directories(broken);
  for (const auto& dir : {task, broken}) std::filesystem::copy_file(fixture("tasks/affine/reference.cpp"), dir / "reference.cpp",
                                                                    std::filesystem::copy_options::overwrite_existing);
  auto manifest = read_file(fixture("tasks/affine/task.toml"));
  ASSERT_TRUE(manifest.has_value());
  auto with = [&](const std::string& name, const std::string& heldout) {
    std::string m = *manifest;
    m.replace(m.find("name = \"affine\""), 15, "name = \"" + name + "\"");
    const auto at = m.find("heldout = ");
    return m.replace(at, m.find('\n', at) - at, "heldout = " + heldout);
  };
  ASSERT_TRUE(write_file_atomic(task / "task.toml", with("heldout_affine", "[ { M = 1, N = " + kHeldOut + " } ]")).has_value());
  ASSERT_TRUE(write_file_atomic(broken / "task.toml", with("heldout_broken", "[ { M = " + kHeldOut + " } ]")).has_value());

  const auto listed = session({request(1, "tools/list")});
  ASSERT_EQ(listed.size(), 1u);
  const std::string good = fixture("tasks/affine/candidates/good.cpp");
  // The arguments of each tool; a tool this map lacks fails the test, so a new tool is checked too.
  const std::map<std::string, std::vector<nlohmann::json>> calls = {
      {"list_tasks", {{{"path", suite.string()}}}},
      {"describe_task", {{{"task", task.string()}}, {{"task", broken.string()}}}},
      {"evaluate", {{{"task", task.string()}, {"candidate", good}, {"target", "cpu"}},
                    {{"task", broken.string()}, {"candidate", good}, {"target", "cpu"}}}},
      {"profile", {{{"task", task.string()}, {"candidate", good}, {"target", "cpu"}}}},
      {"history", {{{"task", "heldout_affine"}}}},
      {"best", {{{"task", "heldout_affine"}}}},
  };
  std::vector<nlohmann::json> messages;
  int id = 0;
  for (const auto& tool : listed[0]["result"]["tools"]) {
    const std::string name = tool["name"];
    const auto it = calls.find(name);
    if (it == calls.end()) {
      ADD_FAILURE() << "tool " << name << " has no call in this test: add one";
      continue;
    }
    for (const auto& args : it->second) messages.push_back(call(++id, name, args));
  }
  const auto replies = session(messages);
  ASSERT_EQ(replies.size(), messages.size());
  for (size_t i = 0; i < replies.size(); ++i) {
    const std::string text = replies[i].dump();
    EXPECT_EQ(text.find(kHeldOut), std::string::npos) << messages[i].dump() << " showed a held-out shape: " << text;
  }
  // The calls did what they were for: the listing has the task, the evaluation passed.
  EXPECT_NE(replies[0].dump().find("heldout_affine"), std::string::npos) << replies[0].dump();
  bool passed = false;
  for (const auto& r : replies) passed = passed || r["result"]["structuredContent"].value("disposition", "") == "passed";
  EXPECT_TRUE(passed);
}

}  // namespace kfab::test
