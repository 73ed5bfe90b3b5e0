// The Redis job queue's pieces that need no server (dist/queue.h): the base64 a job's files travel
// in, and what a bad queue URL says.
#include <gtest/gtest.h>

#include <string>

#include "dist/queue.h"
#include "dist/remote_eval.h"
#include "eval/verdict.h"

namespace kfab {
namespace {

TEST(Base64, EncodesTheStandardVectorsAndRoundTripsEveryByte) {
  // RFC 4648's test vectors
  const std::pair<const char*, const char*> cases[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},       {"foo", "Zm9v"},
                                                       {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : cases) {
    EXPECT_EQ(base64_encode(plain), coded) << plain;
    auto back = base64_decode(coded);
    ASSERT_TRUE(back.has_value()) << coded;
    EXPECT_EQ(*back, plain);
  }
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t cut = 0; cut < 4; ++cut) {  // every padding
    const std::string part = all.substr(cut);
    auto back = base64_decode(base64_encode(part));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, part);
  }
}

TEST(Base64, RefusesWhatIsNotBase64) {
  for (const char* bad : {"Zg=", "Z===", "Zm9v!A==", "=Zm9", "Zg==Zg=="}) EXPECT_FALSE(base64_decode(bad).has_value()) << bad;
}

TEST(JobQueue, ABadUrlIsNamedBeforeAnythingIsTried) {
  QueueOptions q;
  q.url = "http://127.0.0.1:6379";
  auto r = JobQueue::open(q);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find(queue_available() ? "not a Redis URL" : "without hiredis"), std::string::npos) << r.error().message;
  q.url = "redis://127.0.0.1:99999";
  r = JobQueue::open(q);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find(queue_available() ? "not a port" : "without hiredis"), std::string::npos) << r.error().message;
}

// A verdict that travelled (a queue worker's) reads back as the verdict it was: its JSON again, byte
// for byte.
TEST(RemoteEval, AVerdictReadsBackFromItsJson) {
  Verdict v;
  v.task = "softmax";
  v.target = "cuda";
  v.dsl = "cuda";
  v.candidate = "/w/best.cu";
  v.candidate_hash = "abc";
  v.disposition = Disposition::Passed;
  v.detail = "correct on 2 shapes";
  v.speedup = 1.75;
  v.build = {{"cached", true}};
  v.machine = {{"copy_GBps", 3000.0}};
  v.protocol = {{"seeds", 5}};
  v.wall_s = 2.5;
  v.extra["speedup_vs_compile"] = 1.2;
  ShapeResult sr;
  sr.shape = {{"M", 64}, {"N", 1024}};
  sr.status = "passed";
  sr.correct = true;
  sr.errors = {{"max_abs_err", 1e-7}, {"max_rel_err", 2e-6}, {"checked", 65536}, {"mismatches", 0}, {"correct", true}};
  sr.time = TimeStats{0.5, 0.01, 0.49, 0.5, 0.48, 0.5, 100};
  sr.baseline = TimeStats{0.875, 0.02, 0.86, 0.88, 0.85, 0.87, 100};
  sr.bound_ms = 0.4;
  sr.extra["percent_of_copy_bandwidth"] = 81.0;
  v.shapes.push_back(sr);
  ShapeResult held;
  held.shape = {{"M", 7}, {"N", 1000}};
  held.heldout = true;
  held.status = "incorrect";
  v.shapes.push_back(held);
  const auto j = v.to_json();
  EXPECT_EQ(Verdict::from_json(j).to_json(), j);
  auto bad = j;
  bad["disposition"] = "splendid";
  EXPECT_EQ(Verdict::from_json(bad).disposition, Disposition::Crashed);
}

TEST(RemoteEval, TheProtocolTravelsWithTheJob) {
  EvalOptions eo;
  eo.seeds = 2;
  eo.heldout = false;
  eo.min_time_s = 0.03;
  eo.compile_baseline = false;
  eo.end_to_end = true;
  eo.atol = 1e-3;
  eo.forbid = {"torch.matmul"};
  eo.runner.timeout_s = 90;
  const EvalOptions back = eval_options_from_json(eval_options_to_json(eo), EvalOptions{});
  EXPECT_EQ(eval_options_to_json(back), eval_options_to_json(eo));
  EXPECT_EQ(back.seeds, 2);
  EXPECT_FALSE(back.rtol.has_value());
  EXPECT_EQ(*back.atol, 1e-3);
}

}  // namespace
}  // namespace kfab
