// kfab optimize with LLM agents against a scripted OpenAI-compatible server on loopback (no network):
// wrong candidate -> fixer -> correct -> analyst -> faster candidate, with every step in the store;
// kill -9 in the middle and --resume; replay of a recorded run with the server stopped.
#include <gtest/gtest.h>

#include <signal.h>

#include <thread>

#include "core/process.h"
#include "store/store.h"
#include "harness.h"

namespace kfab::test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::vector<Store::Step> steps_of(const fs::path& data, const std::string& run) {
  auto store = Store::open(data / "kfab.db");
  EXPECT_TRUE(store.has_value());
  if (!store) return {};
  auto s = (*store)->run_steps(run);
  return s ? *s : std::vector<Store::Step>{};
}

/// kfab with its own store in `data`.
CliResult kfab_in(const fs::path& data, const std::vector<std::string>& args) {
  return kfab_with(data, shared_test_cache(), data / "std", args);
}

}  // namespace

TEST(Optimize, WrongThenFixedThenFasterWithEveryStepStoredAndReplayable) {
  const fs::path dir = scratch() / "opt1";
  const fs::path data = dir / "data";
  fs::create_directories(data);
  MockLlm llm(fixture("llm/affine_session.json"), dir / "mock");
  CliResult r = kfab_in(data, {"optimize", fixture("tasks/affine"), "--target", "cpu", "--llm", "mock:m1", "--config", llm.config(),
                               "--budget", "3", "--out", (dir / "out").string(), "--json", "--quiet"});
  ASSERT_TRUE(found_correct(r)) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const std::string run = j["run"];
  EXPECT_EQ(j["best"]["disposition"], "passed");
  EXPECT_EQ(j["candidates"], 3);
  EXPECT_TRUE(fs::exists(j["best"]["candidate"].get<std::string>()));

  const auto steps = steps_of(data, run);
  std::vector<std::string> roles, dispositions;
  for (const auto& s : steps) {
    roles.push_back(s.role);
    dispositions.push_back(s.disposition);
  }
  EXPECT_EQ(roles, (std::vector<std::string>{"planner", "coder", "fixer", "analyst", "coder", "final"}));
  EXPECT_EQ(dispositions, (std::vector<std::string>{"", "incorrect", "passed", "", "passed", "passed"}));
  for (size_t i = 0; i + 1 < steps.size(); ++i) {  // every LLM step: its exchange, tokens and dollars
    EXPECT_FALSE(steps[i].call_hash.empty()) << i;
    EXPECT_GT(steps[i].tokens_in, 0) << i;
    EXPECT_GT(steps[i].cost, 0.0) << i;
  }
  ASSERT_EQ(steps.size(), 6u);
  EXPECT_EQ(steps[0].cost, (900 * 2.0 + 40 * 8.0) / 1e6);
  EXPECT_NE(steps[1].detail.find("incorrect"), std::string::npos) << steps[1].detail;
  // The candidate after the analyst is faster than the fixer's (which repeats its work 64 times).
  ASSERT_TRUE(steps[2].speedup && steps[4].speedup);
  EXPECT_GT(*steps[4].speedup, *steps[2].speedup);
  EXPECT_EQ(j["best"]["source_step"], 5);

  // Replay with the server gone: the same candidates and verdicts.
  llm.stop();
  CliResult again = kfab_in(data, {"optimize", fixture("tasks/affine"), "--target", "cpu", "--llm", "replay:" + run, "--budget", "3",
                                   "--out", (dir / "replay").string(), "--json", "--quiet"});
  ASSERT_TRUE(found_correct(again)) << again.out << again.err;
  const auto replayed = steps_of(data, nlohmann::json::parse(again.out)["run"]);
  ASSERT_EQ(replayed.size(), steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(replayed[i].role, steps[i].role) << i;
    EXPECT_EQ(replayed[i].candidate_hash, steps[i].candidate_hash) << i;
    EXPECT_EQ(replayed[i].disposition, steps[i].disposition) << i;
    EXPECT_EQ(replayed[i].call_hash, steps[i].call_hash) << i;
  }
}

TEST(Optimize, KillNineInTheMiddleThenResumeLosesNoEvaluatedCandidate) {
  const fs::path dir = scratch() / "opt2";
  const fs::path data = dir / "data";
  fs::create_directories(data);
  // The analyst's reply is slow: kfab is killed while it waits for it.
  auto script = nlohmann::json::parse(*read_file(fixture("llm/affine_session.json")));
  script[6]["delay"] = 60;  // entries: planner, 429, dropped, coder, malformed, fixer, analyst, coder
  script.insert(script.begin() + 7, script[6]);
  script[7].erase("delay");
  ASSERT_TRUE(write_file_atomic(dir / "script.json", script.dump()).has_value());
  MockLlm llm(dir / "script.json", dir / "mock");

  SpawnOptions so;
  so.argv = {KFAB_BINARY, "optimize", fixture("tasks/affine"), "--target", "cpu", "--llm", "mock:m1", "--config", llm.config(),
             "--budget", "3", "--out", (dir / "out").string(), "--json", "--quiet"};
  so.env = {{"KFAB_DATA_DIR", data.string()}, {"KFAB_CACHE_DIR", std::string(KFAB_BINARY) + ".test-cache"}};
  so.cwd = KFAB_SOURCE_DIR;
  so.output_file = dir / "first.log";
  auto child = Child::spawn(so);
  ASSERT_TRUE(child.has_value());
  std::string run;
  std::vector<Store::Step> before;
  for (int i = 0; i < 600 && before.size() < 3; ++i) {  // planner, coder, fixer stored
    std::this_thread::sleep_for(100ms);
    auto store = Store::open(data / "kfab.db");
    if (!store) continue;
    if (auto latest = (*store)->latest_run(); latest && !latest->empty()) run = *latest;
    if (!run.empty()) before = steps_of(data, run);
  }
  ASSERT_EQ(before.size(), 3u) << "the run did not reach the analyst";
  child->kill_group();  // SIGKILL, mid-run
  const ExitStatus st = child->wait();
  EXPECT_EQ(st.signal, SIGKILL);

  CliResult r = kfab_in(data, {"optimize", "--resume", run, "--json", "--quiet"});
  ASSERT_TRUE(found_correct(r)) << r.out << r.err;
  const auto after = steps_of(data, run);
  ASSERT_GE(after.size(), 5u);
  for (size_t i = 0; i < before.size(); ++i) {  // nothing stored before the kill is lost or changed
    EXPECT_EQ(after[i].role, before[i].role);
    EXPECT_EQ(after[i].candidate_hash, before[i].candidate_hash);
    EXPECT_EQ(after[i].disposition, before[i].disposition);
  }
  EXPECT_EQ(after.back().role, "final");
  EXPECT_EQ(after.back().disposition, "passed");
  int evaluated = 0;
  for (const auto& s : after)
    if (!s.candidate_hash.empty() && s.role != "final") ++evaluated;
  EXPECT_EQ(evaluated, 3);  // the budget, counted across the kill
}

}  // namespace kfab::test

namespace kfab::test {

TEST(Optimize, TheConductorCanStopARunBeforeItsBudgetIsSpent) {
  const fs::path dir = scratch() / "opt3";
  const fs::path data = dir / "data";
  fs::create_directories(data);
  auto script = nlohmann::json::parse(*read_file(fixture("llm/affine_session.json")));
  script.push_back({{"content", "STOP\nThe kernel is at the memory bound; more work will not pay."}});
  ASSERT_TRUE(write_file_atomic(dir / "script.json", script.dump()).has_value());
  MockLlm llm(dir / "script.json", dir / "mock");
  CliResult r = kfab_in(data, {"optimize", fixture("tasks/affine"), "--target", "cpu", "--llm", "mock:m1", "--config", llm.config(),
                               "--budget", "10", "--out", (dir / "out").string(), "--json", "--quiet"});
  ASSERT_TRUE(found_correct(r)) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["candidates"], 3);
  EXPECT_NE(j["stopped_because"].get<std::string>().find("the conductor: STOP"), std::string::npos) << j.dump();
  const auto steps = steps_of(data, j["run"]);
  ASSERT_GE(steps.size(), 2u);
  EXPECT_EQ(steps[steps.size() - 2].role, "conductor");
  EXPECT_EQ(steps.back().role, "final");
}

}  // namespace kfab::test

namespace kfab::test {

/// An evolve run on the cpu target with a scripted LLM; its JSON result.
nlohmann::json evolve_run(const fs::path& dir, const std::vector<std::string>& extra) {
  const fs::path data = dir / "data";
  fs::create_directories(data);
  auto script = nlohmann::json::parse(*read_file(fixture("llm/affine_session.json")));
  // From the conductor on, one reply serves every role: it goes on, and it carries a fast candidate.
  script.push_back({{"content", "CONTINUE: there is budget left.\n```cpp\n" +
                                    script[7]["content"].get<std::string>().substr(7, script[7]["content"].get<std::string>().size() - 10) +
                                    "\n```\n"}});
  EXPECT_TRUE(write_file_atomic(dir / "script.json", script.dump()).has_value());
  MockLlm llm(dir / "script.json", dir / "mock");
  std::vector<std::string> args = {"optimize", fixture("tasks/affine"), "--target", "cpu", "--llm", "mock:m1", "--config", llm.config(),
                                   "--strategy", "evolve", "--budget", "5", "--out", (dir / "out").string(), "--json", "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  CliResult r = kfab_in(data, args);
  EXPECT_TRUE(found_correct(r));
  if (r.status.code != 0 && r.status.code != 4) return {};
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["candidates"], 5);
  EXPECT_EQ(j["best"]["disposition"], "passed");
  std::vector<std::string> roles;
  const auto steps = steps_of(data, j["run"]);
  for (const auto& s : steps) roles.push_back(s.role);
  EXPECT_EQ(roles, (std::vector<std::string>{"planner", "coder", "fixer", "analyst", "coder", "conductor", "analyst", "analyst",
                                             "coder", "coder", "final"}));
  // the generation's two children: each evaluated, its verdict stored with its own step
  EXPECT_EQ(steps.size(), 11u);
  if (steps.size() != 11u) return j;
  for (size_t i : {8u, 9u}) {
    EXPECT_FALSE(steps[i].candidate_hash.empty()) << i;
    EXPECT_EQ(steps[i].disposition, "passed") << i;
    EXPECT_TRUE(steps[i].speedup.has_value()) << i;
  }
  EXPECT_LT(steps[8].seq, steps[9].seq);
  return j;
}

TEST(Optimize, EvolveChildrenAreEvaluatedAtOnceOverTheDevicesGiven) {
  // cpu: --devices 0,0 is two evaluations at once; the steps are stored as one at a time stores them
  const auto j = evolve_run(scratch() / "opt4-devices", {"--devices", "0,0"});
  EXPECT_EQ(j["devices"], nlohmann::json::array({0, 0})) << j.dump();
}

TEST(Optimize, EvolveBreedsAGenerationFromElitesWithSeveralExchangesInFlight) {
  const auto j = evolve_run(scratch() / "opt4", {});
  EXPECT_FALSE(j.contains("devices")) << j.dump();
}

}  // namespace kfab::test

namespace kfab::test {

TEST(Optimize, AnthropicMessagesProviderWithItsKeyFromTheEnvironment) {
  const fs::path dir = scratch() / "opt5";
  const fs::path data = dir / "data";
  fs::create_directories(data);
  MockLlm llm(fixture("llm/affine_session.json"), dir / "mock");
  std::string cfg = *read_file(llm.config());
  cfg.replace(cfg.find("kind = \"openai\""), 15, "kind = \"anthropic\"\napi_key_env = \"KFAB_TEST_LLM_KEY\"");
  ASSERT_TRUE(write_file_atomic(dir / "anthropic.toml", cfg).has_value());
  ::setenv("KFAB_TEST_LLM_KEY", "sk-test-123", 1);
  CliResult r = kfab_in(data, {"optimize", fixture("tasks/affine"), "--target", "cpu", "--llm", "mock:claude-test", "--config",
                               (dir / "anthropic.toml").string(), "--budget", "2", "--out", (dir / "out").string(), "--json", "--quiet"});
  ::unsetenv("KFAB_TEST_LLM_KEY");
  ASSERT_TRUE(found_correct(r)) << r.out << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["best"]["disposition"], "passed");
  auto log = read_file(dir / "mock" / "requests.jsonl");
  ASSERT_TRUE(log.has_value());
  const auto first = nlohmann::json::parse(log->substr(0, log->find('\n')));
  EXPECT_NE(first["path"].get<std::string>().find("/v1/messages"), std::string::npos);
  EXPECT_EQ(first["x-api-key"], "sk-test-123");
  EXPECT_EQ(first["anthropic-version"], "2023-06-01");
  EXPECT_TRUE(first["body"].contains("system"));  // the system prompt is a field of its own
  EXPECT_EQ(first["body"]["messages"][0]["role"], "user");
  EXPECT_EQ(first["body"]["model"], "claude-test");
}

}  // namespace kfab::test

namespace kfab::test {

// The LLM server goes away for good in the middle of a run (every connection dropped): the run ends
// after its retries with a message naming the provider, exit 2, and what it stored stays. With a
// server back (a new one, on another port, under the same config file), --resume finishes the run.
TEST(Optimize, AnLlmServerThatGoesAwayEndsTheRunAndItResumesWhenItIsBack) {
  const fs::path dir = scratch() / "opt-gone";
  const fs::path data = dir / "data";
  fs::create_directories(data);
  const auto session = nlohmann::json::parse(*read_file(fixture("llm/affine_session.json")));
  // entries: planner, 429, dropped, coder, malformed, fixer, analyst, coder
  nlohmann::json first = nlohmann::json::array({session[0], session[3], {{"drop", true}}});  // the last repeats
  nlohmann::json second = nlohmann::json::array({session[5], session[6], session[7]});
  ASSERT_TRUE(write_file_atomic(dir / "first.json", first.dump()).has_value());
  ASSERT_TRUE(write_file_atomic(dir / "second.json", second.dump()).has_value());
  std::string run;
  {
    MockLlm llm(dir / "first.json", dir / "mock");
    CliResult r = kfab_in(data, {"optimize", fixture("tasks/affine"), "--target", "cpu", "--llm", "mock:m1", "--config", llm.config(),
                                 "--budget", "3", "--out", (dir / "out").string(), "--json", "--quiet"});
    ASSERT_TRUE(r.status.exited) << r.status.describe();
    EXPECT_EQ(r.status.code, 2) << r.out << r.err;
    EXPECT_NE((r.out + r.err).find("no answer after 4 attempts"), std::string::npos) << r.out << r.err;
    auto store = Store::open(data / "kfab.db");
    ASSERT_TRUE(store.has_value());
    auto latest = (*store)->latest_run();
    ASSERT_TRUE(latest.has_value());
    run = *latest;
  }
  const auto before = steps_of(data, run);
  ASSERT_EQ(before.size(), 2u);  // the planner's and the coder's steps
  EXPECT_EQ(before[1].disposition, "incorrect");

  MockLlm back(dir / "second.json", dir / "mock");  // rewrites the config the run names, with its port
  CliResult r = kfab_in(data, {"optimize", "--resume", run, "--json", "--quiet"});
  ASSERT_TRUE(found_correct(r)) << r.out << r.err;
  const auto after = steps_of(data, run);
  ASSERT_GE(after.size(), 5u);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].role, before[i].role);
    EXPECT_EQ(after[i].candidate_hash, before[i].candidate_hash);
  }
  EXPECT_EQ(after.back().role, "final");
  EXPECT_EQ(after.back().disposition, "passed");
}

}  // namespace kfab::test

namespace kfab::test {

// Issue 20: bytes that are not UTF-8, in an LLM's reply (raw 0xFF 0xFE in the HTTP body) and in what
// the candidate it wrote prints before it crashes, ended kfab with exit 3 and lost the coder's step.
// Now the reply is kept with U+FFFD for the bad bytes, the crash is the coder's verdict, and the
// fixer gets the next turn.
TEST(Optimize, BytesThatAreNotUtf8FromTheLlmAndFromACrashingCandidateAreStoredAndTheRunGoesOn) {
  const fs::path dir = scratch() / "opt-garbled";
  const fs::path data = dir / "data";
  fs::create_directories(data);
  const auto session = nlohmann::json::parse(*read_file(fixture("llm/affine_session.json")));
  const std::string crash = *read_file(fixture("broken/garbled_crash.cpp"));
  const nlohmann::json script = {
      session[0],  // planner
      {{"content", "Here it is.\n```cpp\n// the model said: @BAD_BYTES@\n" + crash + "```\n"}, {"bad_bytes", "@BAD_BYTES@"}},
      session[5]};  // the fixer's correct candidate
  ASSERT_TRUE(write_file_atomic(dir / "script.json", script.dump()).has_value());
  MockLlm llm(dir / "script.json", dir / "mock");
  CliResult r = kfab_in(data, {"optimize", fixture("tasks/affine"), "--target", "cpu", "--llm", "mock:m1", "--config", llm.config(),
                               "--budget", "2", "--out", (dir / "out").string(), "--json", "--quiet"});
  ASSERT_TRUE(found_correct(r)) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["best"]["disposition"], "passed");
  const auto steps = steps_of(data, j["run"]);
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[1].role, "coder");
  EXPECT_EQ(steps[1].disposition, "crashed");
  const std::string bad = "\xEF\xBF\xBD\xEF\xBF\xBD";  // U+FFFD twice
  EXPECT_NE(steps[1].detail.find("garbled: " + bad + " before the crash"), std::string::npos) << steps[1].detail;
  auto store = Store::open(data / "kfab.db");
  ASSERT_TRUE(store.has_value());
  auto reply = (*store)->llm_response(steps[1].call_hash);
  ASSERT_TRUE(reply.has_value());
  EXPECT_NE(reply->find("the model said: " + bad), std::string::npos) << *reply;
  EXPECT_EQ(steps[2].role, "fixer");
  EXPECT_EQ(steps[2].disposition, "passed");
  // the fixer was told how the coder's candidate crashed, in a request the server could read as JSON
  auto log = read_file(dir / "mock" / "requests.jsonl");
  ASSERT_TRUE(log.has_value());
  EXPECT_NE(log->find("garbled: \\ufffd\\ufffd before the crash"), std::string::npos) << *log;
}

}  // namespace kfab::test
