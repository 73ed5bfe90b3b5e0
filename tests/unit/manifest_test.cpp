#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/task.h"

namespace kfab {

namespace fs = std::filesystem;

namespace {

const char* kGood = R"(name = "t"
summary = "s"
op_class = "softmax"

[[input]]
name = "x"
dtype = "f32"
shape = ["M", "N"]
init = "uniform"
low = -2.0
high = 2.0

[[input]]
name = "idx"
dtype = "i64"
shape = ["M"]
init = "randint"
low = 0
high = 7

[[output]]
name = "y"
dtype = "f32"
shape = ["M", "2*N"]
atol = 1e-3

[shapes]
tune = [ { M = 4, N = 8 } ]
heldout = [ { M = 3, N = 5 } ]

[reference]
source = "reference.cpp"

[tolerance]
rtol = 1e-3

[cost]
flops = "5*M*N"
bytes = "12*M*N"
)";

class Manifest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kfab-manifest-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    std::ofstream(dir_ / "reference.cpp") << "// reference\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  Expected<Task> load(const std::string& text) {
    std::ofstream(dir_ / "task.toml") << text;
    return load_task(dir_);
  }
  /// Replaces the first occurrence of `from` in the good manifest.
  static std::string edit(const std::string& from, const std::string& to) {
    std::string s = kGood;
    auto pos = s.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    return s.replace(pos, from.size(), to);
  }
  /// The error's full text, message and hint.
  std::string error_of(const std::string& text) {
    auto t = load(text);
    EXPECT_FALSE(t.has_value());
    return t ? "" : t.error().to_string();
  }
  fs::path dir_;
};

}  // namespace

TEST_F(Manifest, LoadsEveryField) {
  auto t = load(kGood);
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_EQ(t->name, "t");
  EXPECT_EQ(t->op_class, "softmax");
  ASSERT_EQ(t->inputs.size(), 2u);
  EXPECT_EQ(t->inputs[0].init.kind, InitKind::Uniform);
  EXPECT_EQ(t->inputs[0].init.a, -2.0);
  EXPECT_EQ(t->inputs[1].dtype, DType::I64);
  EXPECT_EQ(t->inputs[1].init.kind, InitKind::RandInt);
  EXPECT_EQ(t->inputs[1].init.b, 7.0);
  EXPECT_EQ(t->dims(t->outputs[0], t->tune[0]), (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(t->heldout.size(), 1u);
  EXPECT_EQ(*t->flops(t->tune[0]), 160.0);
  const Tolerance tol = t->tolerance_for(t->outputs[0]);
  EXPECT_EQ(tol.atol, 1e-3);  // the output's own
  EXPECT_EQ(tol.rtol, 1e-3);  // the task's
  EXPECT_TRUE(t->reference.is_absolute());
}

TEST_F(Manifest, DefaultTolerancesDependOnTheDtype) {
  EXPECT_EQ(default_tolerance(DType::F32).atol, 1e-5);
  EXPECT_EQ(default_tolerance(DType::F32).rtol, 1e-4);
  EXPECT_EQ(default_tolerance(DType::F16).atol, 1e-2);
  EXPECT_EQ(default_tolerance(DType::BF16).rtol, 1e-2);
  EXPECT_EQ(default_tolerance(DType::I32).atol, 0.0);
}

TEST_F(Manifest, MissingFieldNamesFileLineAndField) {
  const std::string e = error_of(edit("name = \"y\"\ndtype = \"f32\"", "name = \"y\""));
  EXPECT_NE(e.find("task.toml:"), std::string::npos) << e;
  EXPECT_NE(e.find("output(y).dtype: missing"), std::string::npos) << e;
}

TEST_F(Manifest, UnboundShapeSymbolPointsAtTheShapeLine) {
  const std::string e = error_of(edit("shape = [\"M\"]", "shape = [\"K\"]"));
  EXPECT_NE(e.find("task.toml:16: input(idx).shape: expression \"K\": symbol K is not bound in shapes.tune"), std::string::npos) << e;
}

TEST_F(Manifest, MissingNameIsReported) {
  const std::string e = error_of(edit("name = \"t\"\n", ""));
  EXPECT_NE(e.find("name: missing"), std::string::npos) << e;
}

TEST_F(Manifest, WrongTypeNamesWhatIsAccepted) {
  const std::string e = error_of(edit("shape = [\"M\", \"N\"]", "shape = \"M\""));
  EXPECT_NE(e.find("task.toml:8: input(x).shape: must be an array"), std::string::npos) << e;
  EXPECT_NE(e.find("accepted:"), std::string::npos) << e;
}

TEST_F(Manifest, UnknownDtypeListsTheAcceptedOnes) {
  const std::string e = error_of(edit("dtype = \"f32\"", "dtype = \"float33\""));
  EXPECT_NE(e.find("task.toml:7: input(x).dtype: unknown dtype \"float33\""), std::string::npos) << e;
  EXPECT_NE(e.find("f32, f16, bf16, f64, i32, i64, i8, u8, bool"), std::string::npos) << e;
}

TEST_F(Manifest, UnboundShapeSymbolNamesTheShapeSet) {
  const std::string e = error_of(edit("heldout = [ { M = 3, N = 5 } ]", "heldout = [ { M = 3 } ]"));
  EXPECT_NE(e.find("symbol N is not bound in shapes.heldout {M=3}"), std::string::npos) << e;
}

TEST_F(Manifest, UnboundCostSymbolIsReported) {
  const std::string e = error_of(edit("flops = \"5*M*N\"", "flops = \"5*M*K\""));
  EXPECT_NE(e.find("task.toml:38: cost.flops: expression \"5*M*K\": symbol K is not bound in shapes.tune {M=4, N=8}"), std::string::npos) << e;
}

TEST_F(Manifest, MissingReferenceFileIsReported) {
  const std::string e = error_of(edit("source = \"reference.cpp\"", "source = \"nope.cpp\""));
  EXPECT_NE(e.find("reference.source: file"), std::string::npos) << e;
  EXPECT_NE(e.find("nope.cpp does not exist"), std::string::npos) << e;
}

TEST_F(Manifest, UnknownFieldIsATypo) {
  const std::string e = error_of(edit("init = \"uniform\"", "init = \"uniform\"\nstdd = 3.0"));
  EXPECT_NE(e.find("input[0].stdd: unknown field"), std::string::npos) << e;
}

TEST_F(Manifest, InitialiserParametersMustFitTheInitialiser) {
  EXPECT_NE(error_of(edit("init = \"uniform\"", "init = \"gaussian\"")).find("unknown initialiser \"gaussian\""), std::string::npos);
  EXPECT_NE(error_of(edit("low = -2.0", "mean = 1.0")).find("does not apply to init \"uniform\""), std::string::npos);
  EXPECT_NE(error_of(edit("high = 2.0", "high = -3.0")).find("low must be below high"), std::string::npos);
}

TEST_F(Manifest, ShapesMustBePositiveIntegers) {
  EXPECT_NE(error_of(edit("tune = [ { M = 4, N = 8 } ]", "tune = [ { M = 0, N = 8 } ]")).find("shapes.tune.M: must be a positive integer"),
            std::string::npos);
  EXPECT_NE(error_of(edit("tune = [ { M = 4, N = 8 } ]", "tune = []")).find("shapes.tune: must be a non-empty array"), std::string::npos);
  const std::string e = error_of(edit("shape = [\"M\", \"2*N\"]", "shape = [\"M\", \"N/3\"]"));
  EXPECT_NE(e.find("task.toml:24: output(y).shape: \"N/3\" is 2.666667 in shapes.tune {M=4, N=8}"), std::string::npos) << e;
}

TEST_F(Manifest, InvalidTomlGivesLineAndColumn) {
  const std::string e = error_of(edit("name = \"t\"", "name = \"t"));
  EXPECT_NE(e.find("task.toml:1:"), std::string::npos) << e;
  EXPECT_NE(e.find("not valid TOML"), std::string::npos) << e;
}

TEST_F(Manifest, MissingManifest) {
  auto t = load_task(dir_ / "absent");
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find("no such task manifest"), std::string::npos);
}

TEST_F(Manifest, DuplicateTensorNamesAreRejected) {
  const std::string e = error_of(edit("name = \"idx\"", "name = \"x\""));
  EXPECT_NE(e.find("duplicate tensor name"), std::string::npos) << e;
}

TEST_F(Manifest, GpuTuningShapesReplaceTheTuningShapesOnAGpu) {
  auto t = load(edit("heldout = [ { M = 3, N = 5 } ]", "heldout = [ { M = 3, N = 5 } ]\n\n[shapes.gpu]\ntune = [ { M = 4096, N = 512 } ]"));
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  ASSERT_EQ(t->tune_gpu.size(), 1u);
  EXPECT_EQ(t->tune_gpu[0].at("M"), 4096);
  EXPECT_EQ(t->tune_for(true).front().at("M"), 4096);
  EXPECT_EQ(t->tune_for(false).front().at("M"), 4);
  EXPECT_EQ(t->heldout.size(), 1u);  // held-out shapes are the same everywhere
  auto plain = load(kGood);
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->tune_for(true).front().at("M"), 4);  // no [shapes.gpu]: the tuning shapes everywhere
}

TEST_F(Manifest, GpuTuningShapesAreCheckedLikeTheOthers) {
  const std::string unbound =
      error_of(edit("heldout = [ { M = 3, N = 5 } ]", "heldout = [ { M = 3, N = 5 } ]\n[shapes.gpu]\ntune = [ { M = 4096 } ]"));
  EXPECT_NE(unbound.find("symbol N is not bound in shapes.gpu.tune {M=4096}"), std::string::npos) << unbound;
  const std::string typo =
      error_of(edit("heldout = [ { M = 3, N = 5 } ]", "heldout = [ { M = 3, N = 5 } ]\n[shapes.gpu]\ntunes = [ { M = 1, N = 1 } ]"));
  EXPECT_NE(typo.find("shapes.gpu.tunes"), std::string::npos) << typo;
  const std::string empty =
      error_of(edit("heldout = [ { M = 3, N = 5 } ]", "heldout = [ { M = 3, N = 5 } ]\n[shapes.gpu]\ntune = []"));
  EXPECT_NE(empty.find("shapes.gpu.tune: must be a non-empty array"), std::string::npos) << empty;
}

// Issue 20: shapes no machine could hold are the task's fault, refused at load with the file, the line,
// the tensor and the shape entry: never a candidate's crash.
TEST_F(Manifest, TenToTheTwelveElementsAreRefusedAtLoad) {
  const std::string e = error_of(edit("tune = [ { M = 4, N = 8 } ]", "tune = [ { M = 1000000, N = 1000000 } ]"));
  EXPECT_NE(e.find("task.toml:24: output(y).shape: 7.3 TiB in shapes.tune[0] {M=1000000, N=1000000}; one evaluation of the shape holds"),
            std::string::npos) << e;
  EXPECT_NE(e.find("past kfab's limit of 1.0 TiB"), std::string::npos) << e;
}

TEST_F(Manifest, ElementCountsThatOverflowAreRefusedAtLoad) {
  const std::string e = error_of(edit("heldout = [ { M = 3, N = 5 } ]", "heldout = [ { M = 3, N = 5 }, { M = 4294967296, N = 4294967296 } ]"));
  EXPECT_NE(e.find("task.toml:8: input(x).shape: the element count overflows a 64-bit integer in shapes.heldout[1] "
                   "{M=4294967296, N=4294967296} (at dimension 1, \"N\")"),
            std::string::npos) << e;
  // A dimension past 2^63 (an expression's value), and bytes that overflow although the count does not.
  const std::string dim = error_of(edit("shape = [\"M\", \"2*N\"]", "shape = [\"M\", \"N*N*N*N*N*N*N*N*N*N*N*N*N*N*N*N*N*N*N*N*N*N\"]"));
  EXPECT_NE(dim.find("output(y).shape[1]"), std::string::npos) << dim;
  EXPECT_NE(dim.find("past a 64-bit integer"), std::string::npos) << dim;
  const std::string bytes = error_of(edit("tune = [ { M = 4, N = 8 } ]", "tune = [ { M = 4, N = 576460752303423488 } ]"));
  EXPECT_NE(bytes.find("input(x).shape"), std::string::npos) << bytes;
  EXPECT_NE(bytes.find("overflow"), std::string::npos) << bytes;
}

TEST_F(Manifest, CheckFitsNamesTheShapeEntryTheTensorAndTheLimit) {
  auto t = load(edit("heldout = [ { M = 3, N = 5 } ]", "heldout = [ { M = 30, N = 50 } ]"));
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  // x 4x8 f32, idx 4 i64, y 4x16 f32: each held twice (inputs and their snapshot, both outputs).
  EXPECT_EQ(evaluation_bytes(*t, t->tune[0]), 2u * (128 + 32 + 256));
  EXPECT_TRUE(check_fits(*t, 1u << 20).has_value());
  FitScope tuning;
  tuning.heldout = false;
  tuning.limit = "the test allows";
  tuning.remedy = ", or else";
  auto tune = check_fits(*t, 831, tuning);
  ASSERT_FALSE(tune.has_value());
  EXPECT_EQ(tune.error().message, t->manifest.string() + ": output(y).shape: 256 bytes in shapes.tune[0] {M=4, N=8}; one evaluation of the "
                                  "shape holds 832 bytes (the inputs and their snapshot, the candidate's and the reference's outputs), "
                                  "more than the 831 bytes the test allows");
  EXPECT_EQ(tune.error().hint, "shapes that fit 831 bytes, or else");
  EXPECT_TRUE(check_fits(*t, 832, tuning).has_value());
  auto held = check_fits(*t, 832);
  ASSERT_FALSE(held.has_value());
  EXPECT_NE(held.error().message.find("output(y).shape: 11.7 KiB in shapes.heldout[0];"), std::string::npos) << held.error().message;
  EXPECT_EQ(held.error().message.find("M=30"), std::string::npos) << "a held-out shape's sizes were shown";
}

}  // namespace kfab

namespace kfab {

// A task is told apart once, when it is opened: a folder or task.toml is native (loaded and checked), a
// .py file is KernelBench-format and carries its identity for the store; what is neither is said.
TEST_F(Manifest, OpenTaskTellsTheFormatsApartOnce) {
  std::ofstream(dir_ / "task.toml") << kGood;
  auto native = open_task(dir_);
  ASSERT_TRUE(native.has_value()) << native.error().to_string();
  EXPECT_FALSE(native->kernelbench());
  EXPECT_EQ(native->format_name(), "native");
  EXPECT_EQ(native->task.name, "t");
  EXPECT_EQ(native->task.tune.size(), 1u);

  std::ofstream(dir_ / "19_ReLU.py") << "class Model:\n    pass\ndef get_inputs():\n    return []\n";
  auto kb = open_task(dir_ / "19_ReLU.py");
  ASSERT_TRUE(kb.has_value()) << kb.error().to_string();
  EXPECT_TRUE(kb->kernelbench());
  EXPECT_EQ(kb->format_name(), "kernelbench");
  EXPECT_EQ(kb->task.name, "19_ReLU");
  EXPECT_EQ(kb->task.manifest, fs::absolute(dir_ / "19_ReLU.py"));
  EXPECT_TRUE(kb->task.tune.empty());

  auto missing = open_task(dir_ / "absent.py");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("no such task file"), std::string::npos) << missing.error().message;
  auto broken = open_task(dir_ / "nothing-here");
  ASSERT_FALSE(broken.has_value());
  EXPECT_NE(broken.error().message.find("no such task manifest"), std::string::npos) << broken.error().message;
}

}  // namespace kfab
