// The Redis job queue's pieces that need no server (dist/queue.h): the base64 a job's files travel
// in, and what a bad queue URL says.
#include <gtest/gtest.h>

#include <string>

#include "dist/queue.h"

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

}  // namespace
}  // namespace kfab
