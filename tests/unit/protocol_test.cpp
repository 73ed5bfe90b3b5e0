#include <gtest/gtest.h>
#include <unistd.h>

#include "runner/protocol.h"

namespace kfab {

TEST(Protocol, RoundTripsFramedJson) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  nlohmann::json msg = {{"op", "verify"}, {"shape", {{"M", 3}}}, {"text", std::string(10000, 'x')}};
  ASSERT_TRUE(write_message(p[1], msg));
  ReadResult r = read_message(p[0], std::chrono::steady_clock::now() + std::chrono::seconds(5));
  ASSERT_EQ(r.status, ReadStatus::Ok);
  EXPECT_EQ(r.message, msg);
  ::close(p[1]);
  EXPECT_EQ(read_message(p[0]).status, ReadStatus::Eof);
  ::close(p[0]);
}

TEST(Protocol, TimesOutWithoutData) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ReadResult r = read_message(p[0], std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
  EXPECT_EQ(r.status, ReadStatus::Timeout);
  ::close(p[0]);
  ::close(p[1]);
}

TEST(Protocol, RejectsOversizedAndMalformedFrames) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const unsigned char huge[4] = {0xff, 0xff, 0xff, 0xff};
  ASSERT_EQ(::write(p[1], huge, 4), 4);
  EXPECT_EQ(read_message(p[0]).status, ReadStatus::Malformed);
  const unsigned char len[4] = {3, 0, 0, 0};
  ASSERT_EQ(::write(p[1], len, 4), 4);
  ASSERT_EQ(::write(p[1], "{{{", 3), 3);
  ReadResult r = read_message(p[0]);
  EXPECT_EQ(r.status, ReadStatus::Malformed);
  EXPECT_NE(r.error.find("not JSON"), std::string::npos);
  ::close(p[0]);
  ::close(p[1]);
}

}  // namespace kfab
