#include <gtest/gtest.h>

#include "agent/extract.h"

namespace kfab {

TEST(Extract, PicksTheFencedBlockWithTheEntryPointAmongProseAndOtherBlocks) {
  const std::string reply =
      "Here is the plan.\n```text\nstep 1\n```\nAnd the code:\n```cpp\n#include <kfab/candidate.h>\nKFAB_EXPORT int kfab_run() { return 0; }\n```\nDone.";
  auto e = extract_code(reply, "cpp");
  ASSERT_TRUE(e.has_value()) << e.error().message;
  EXPECT_EQ(e->code, "#include <kfab/candidate.h>\nKFAB_EXPORT int kfab_run() { return 0; }\n");
  EXPECT_FALSE(e->truncated);
}

TEST(Extract, TakesTheLastOfSeveralCandidateBlocks) {
  const std::string reply = "```cpp\nint kfab_run_v1;\n```\nBetter:\n```c++\nint kfab_run_v2;\n```\n";
  auto e = extract_code(reply, "cpp");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "int kfab_run_v2;\n");
}

TEST(Extract, ATruncatedBlockIsReturnedAndMarked) {
  auto e = extract_code("```cuda\n__global__ void k() {}\nKFAB_EXPORT int kfab_run(", "cuda");
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->truncated);
  EXPECT_NE(e->code.find("kfab_run("), std::string::npos);
}

TEST(Extract, BareCodeWithoutFencesIsAccepted) {
  auto e = extract_code("import triton\ndef run(inputs, outputs):\n    pass\n", "triton");
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->code.find("def run("), std::string::npos);
}

TEST(Extract, RepliesWithoutUsableCodeSayWhatIsMissing) {
  auto none = extract_code("I think you should use shared memory.", "cpp");
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().message.find("no code block"), std::string::npos);
  auto wrong = extract_code("```cpp\nint helper();\n```", "cpp");
  ASSERT_FALSE(wrong.has_value());
  EXPECT_NE(wrong.error().message.find("defines kfab_run"), std::string::npos);
  auto empty = extract_code("  \n", "modelnew");
  ASSERT_FALSE(empty.has_value());
  EXPECT_NE(empty.error().message.find("empty"), std::string::npos);
  auto inline_fence = extract_code("use ``` inline ``` kfab_run", "cpp");  // not a fence: mid-line
  ASSERT_TRUE(inline_fence.has_value());  // bare text naming the entry point is taken as code
}

}  // namespace kfab

#include "eval/torch_harness.h"

namespace kfab {

TEST(Withhold, RemovesHeldOutAssignmentsAcrossLinesAndKeepsTheRest) {
  const std::string py = "a = 1\nKFAB_HELDOUT = [\n    {\"a\": 3},\n]\nKFAB_HELDOUTX = 2\nb = 2\n";
  EXPECT_EQ(withhold(py, "KFAB_HELDOUT"), "a = 1\n# (held-out shapes withheld)\nKFAB_HELDOUTX = 2\nb = 2\n");
  const std::string toml = "tune = [ { M = 1 } ]\nheldout = [ { M = 97 } ]\n[reference]\n";
  EXPECT_EQ(withhold(toml, "heldout"), "tune = [ { M = 1 } ]\n# (held-out shapes withheld)\n[reference]\n");
}

}  // namespace kfab
