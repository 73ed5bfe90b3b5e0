#include "core/task.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <toml++/toml.h>

namespace kfab {

namespace fs = std::filesystem;

std::string_view init_name(InitKind k) {
  switch (k) {
    case InitKind::Normal: return "normal";
    case InitKind::Uniform: return "uniform";
    case InitKind::RandInt: return "randint";
    case InitKind::Zeros: return "zeros";
    case InitKind::Ones: return "ones";
    case InitKind::Bernoulli: return "bernoulli";
  }
  return "?";
}

Tolerance default_tolerance(DType t) {
  switch (t) {
    case DType::F32: return {1e-5, 1e-4};
    case DType::F64: return {1e-8, 1e-7};
    case DType::F16:
    case DType::BF16: return {1e-2, 1e-2};
    default: return {0.0, 0.0};
  }
}

Tolerance Task::tolerance_for(const TensorSpec& out) const {
  Tolerance t = default_tolerance(out.dtype);
  if (dtype_is_float(out.dtype)) {
    if (atol) t.atol = *atol;
    if (rtol) t.rtol = *rtol;
  }
  if (out.atol) t.atol = *out.atol;
  if (out.rtol) t.rtol = *out.rtol;
  return t;
}

std::vector<int64_t> Task::dims(const TensorSpec& t, const ShapeBinding& b) const {
  std::vector<int64_t> d;
  d.reserve(t.shape.size());
  for (const auto& e : t.shape) {
    auto v = eval_expr(e, b);
    KFAB_ASSERT(v.has_value(), "shape validated at load time");
    d.push_back(static_cast<int64_t>(std::llround(*v)));
  }
  return d;
}

static std::optional<double> eval_cost(const std::string& e, const ShapeBinding& b) {
  if (e.empty()) return std::nullopt;
  auto v = eval_expr(e, b);
  if (!v) return std::nullopt;
  return *v;
}

std::optional<double> Task::flops(const ShapeBinding& b) const { return eval_cost(cost_flops, b); }
std::optional<double> Task::bytes(const ShapeBinding& b) const { return eval_cost(cost_bytes, b); }

namespace {

/// One evaluation of a shape at most (inputs and their snapshot, both outputs): more than any machine
/// kfab runs on holds, so a shape past it is a typo or a trap, whatever the target.
constexpr uint64_t kMaxEvaluationBytes = 1ull << 40;

/// "4.0 GiB"
std::string fmt_bytes(uint64_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

/// An element count or dimension, exact below 10^15, else as 1e+18.
std::string fmt_count(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, v < 1e15 ? "%.0f" : "%.3g", v);
  return buf;
}

}  // namespace

std::string format_binding(const ShapeBinding& b) {
  std::string s;
  for (const auto& [k, v] : b) {
    if (!s.empty()) s += ", ";
    s += k + "=" + std::to_string(v);
  }
  return s;
}

namespace {

/// Collects the file name and turns "field: problem" into "file:line: field: problem".
class ManifestReader {
 public:
  explicit ManifestReader(fs::path file) : file_(std::move(file)) {}

  Unexpected fail(const toml::node* at, const std::string& field, const std::string& problem,
                  const std::string& accepted = {}) const {
    std::string where = file_.string();
    if (at != nullptr && at->source().begin.line > 0)
      where += ":" + std::to_string(at->source().begin.line);
    std::string msg = where + ": " + field + ": " + problem;
    return make_error(msg, accepted.empty() ? std::string{} : "accepted: " + accepted);
  }

  /// Rejects keys a table does not know, so a typo is not silently ignored.
  Expected<void> only_keys(const toml::table& t, const std::string& where,
                           std::initializer_list<std::string_view> keys) const {
    for (const auto& [k, v] : t) {
      bool known = false;
      for (auto key : keys) known = known || key == k.str();
      if (!known) {
        std::string list;
        for (auto key : keys) list += (list.empty() ? "" : ", ") + std::string(key);
        return fail(&v, where + std::string(k.str()), "unknown field", list);
      }
    }
    return {};
  }

  Expected<std::string> string_field(const toml::table& t, const toml::node* parent,
                                     const std::string& where, std::string_view key,
                                     bool required) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      if (required) return fail(parent, where + std::string(key), "missing", "a string");
      return std::string{};
    }
    if (!n->is_string()) return fail(n, where + std::string(key), "must be a string", "a string");
    return std::string(n->as_string()->get());
  }

  Expected<std::optional<double>> number_field(const toml::table& t, const std::string& where,
                                               std::string_view key) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return std::optional<double>{};
    if (auto f = n->as_floating_point()) return std::optional<double>{f->get()};
    if (auto i = n->as_integer()) return std::optional<double>{static_cast<double>(i->get())};
    return fail(n, where + std::string(key), "must be a number", "an integer or a float");
  }

  const fs::path& file() const { return file_; }

 private:
  fs::path file_;
};

Expected<TensorSpec> read_tensor(const ManifestReader& r, const toml::node& node,
                                 const std::string& where, bool is_input) {
  const toml::table* t = node.as_table();
  if (t == nullptr)
    return r.fail(&node, where, "must be a table", "[[" + std::string(is_input ? "input" : "output") + "]] entries");
  TensorSpec s;
  if (is_input) {
    if (auto ok = r.only_keys(*t, where + ".", {"name", "dtype", "shape", "init", "mean", "std", "low", "high", "p"}); !ok)
      return Unexpected{ok.error()};
  } else {
    if (auto ok = r.only_keys(*t, where + ".", {"name", "dtype", "shape", "atol", "rtol"}); !ok)
      return Unexpected{ok.error()};
  }
  auto name = r.string_field(*t, &node, where + ".", "name", true);
  if (!name) return Unexpected{name.error()};
  s.name = *name;
  const std::string field = std::string(is_input ? "input" : "output") + "(" + s.name + ").";

  auto dt = r.string_field(*t, &node, field, "dtype", true);
  if (!dt) return Unexpected{dt.error()};
  auto parsed = parse_dtype(*dt);
  if (!parsed)
    return r.fail(t->get("dtype"), field + "dtype", "unknown dtype \"" + *dt + "\"",
                  std::string(dtype_accepted()));
  s.dtype = *parsed;

  const toml::node* shape = t->get("shape");
  if (shape == nullptr) return r.fail(&node, field + "shape", "missing", "an array of symbols, integers or expressions, [] for a scalar");
  const toml::array* arr = shape->as_array();
  if (arr == nullptr)
    return r.fail(shape, field + "shape", "must be an array", "an array such as [\"M\", \"N\"] or [128, \"2*N\"]");
  for (const auto& d : *arr) {
    if (auto i = d.as_integer()) {
      if (i->get() <= 0) return r.fail(&d, field + "shape", "dimension must be positive", "integers > 0");
      s.shape.push_back(std::to_string(i->get()));
    } else if (auto str = d.as_string()) {
      if (auto syms = expr_symbols(str->get()); !syms)
        return r.fail(&d, field + "shape", syms.error().message, "a symbol, an integer or an expression of symbols");
      s.shape.push_back(str->get());
    } else {
      return r.fail(&d, field + "shape", "dimension must be an integer or a string", "integers > 0, symbols, expressions");
    }
  }

  if (is_input) {
    s.init = dtype_is_float(s.dtype) ? InitSpec{InitKind::Normal, 0.0, 1.0}
             : s.dtype == DType::Bool ? InitSpec{InitKind::Bernoulli, 0.5, 0.0}
                                      : InitSpec{InitKind::RandInt, 0.0, 10.0};
    auto init = r.string_field(*t, &node, field, "init", false);
    if (!init) return Unexpected{init.error()};
    const std::string accepted = "normal (mean, std), uniform (low, high), randint (low, high), zeros, ones, bernoulli (p)";
    if (!init->empty()) {
      if (*init == "normal") s.init = {InitKind::Normal, 0.0, 1.0};
      else if (*init == "uniform") s.init = {InitKind::Uniform, -1.0, 1.0};
      else if (*init == "randint" || *init == "integers") s.init = {InitKind::RandInt, 0.0, 10.0};
      else if (*init == "zeros") s.init = {InitKind::Zeros, 0.0, 0.0};
      else if (*init == "ones") s.init = {InitKind::Ones, 0.0, 0.0};
      else if (*init == "bernoulli") s.init = {InitKind::Bernoulli, 0.5, 0.0};
      else return r.fail(t->get("init"), field + "init", "unknown initialiser \"" + *init + "\"", accepted);
    }
    struct Param {
      std::string_view key;
      InitKind kind;
      double* slot;
    };
    const Param params[] = {{"mean", InitKind::Normal, &s.init.a}, {"std", InitKind::Normal, &s.init.b},
                            {"low", InitKind::Uniform, &s.init.a}, {"high", InitKind::Uniform, &s.init.b},
                            {"p", InitKind::Bernoulli, &s.init.a}};
    for (const auto& p : params) {
      auto v = r.number_field(*t, field, p.key);
      if (!v) return Unexpected{v.error()};
      if (!v->has_value()) continue;
      const bool fits = p.kind == s.init.kind ||
                        (p.kind == InitKind::Uniform && s.init.kind == InitKind::RandInt);
      if (!fits)
        return r.fail(t->get(p.key), field + std::string(p.key),
                      "does not apply to init \"" + std::string(init_name(s.init.kind)) + "\"", accepted);
      *p.slot = **v;
    }
    if ((s.init.kind == InitKind::Uniform || s.init.kind == InitKind::RandInt) && !(s.init.a < s.init.b))
      return r.fail(&node, field + "low", "low must be below high", "low < high");
    if (s.init.kind == InitKind::Normal && !(s.init.b >= 0.0))
      return r.fail(&node, field + "std", "must not be negative", "std >= 0");
    if (s.init.kind == InitKind::Bernoulli && !(s.init.a >= 0.0 && s.init.a <= 1.0))
      return r.fail(&node, field + "p", "must lie in [0, 1]", "0 <= p <= 1");
  } else {
    for (std::string_view key : {"atol", "rtol"}) {
      auto v = r.number_field(*t, field, key);
      if (!v) return Unexpected{v.error()};
      if (v->has_value() && **v < 0.0) return r.fail(t->get(key), field + std::string(key), "must not be negative", "a number >= 0");
      (key == "atol" ? s.atol : s.rtol) = *v;
    }
  }
  return s;
}

Expected<std::vector<ShapeBinding>> read_shape_sets(const ManifestReader& r, const toml::table& shapes,
                                                    const toml::node* parent, std::string_view key,
                                                    bool required, std::string_view prefix = "shapes.") {
  std::vector<ShapeBinding> out;
  const std::string field = std::string(prefix) + std::string(key);
  const toml::node* n = shapes.get(key);
  if (n == nullptr) {
    if (required) return r.fail(parent, field, "missing", "an array of inline tables such as [ { M = 128, N = 256 } ]");
    return out;
  }
  const toml::array* arr = n->as_array();
  if (arr == nullptr || (required && arr->empty()))
    return r.fail(n, field, "must be a non-empty array of inline tables", "[ { M = 128, N = 256 } ]");
  for (const auto& e : *arr) {
    const toml::table* t = e.as_table();
    if (t == nullptr) return r.fail(&e, field, "entry must be an inline table", "{ M = 128, N = 256 }");
    ShapeBinding b;
    for (const auto& [k, v] : *t) {
      auto i = v.as_integer();
      if (i == nullptr || i->get() <= 0)
        return r.fail(&v, field + "." + std::string(k.str()), "must be a positive integer", "integers > 0");
      b[std::string(k.str())] = i->get();
    }
    out.push_back(std::move(b));
  }
  return out;
}

/// [[input]] and [[output]]: unique names.
Expected<void> read_tensors(ManifestReader& r, const toml::table& root, Task& task) {
  std::set<std::string> names;
  for (const bool is_input : {true, false}) {
    const char* key = is_input ? "input" : "output";
    const toml::node* n = root.get(key);
    if (n == nullptr) {
      if (is_input) continue;
      return r.fail(nullptr, "output", "missing", "at least one [[output]] table");
    }
    const toml::array* arr = n->as_array();
    if (arr == nullptr || (!is_input && arr->empty()))
      return r.fail(n, key, "must be an array of tables", std::string("[[") + key + "]] tables");
    for (size_t i = 0; i < arr->size(); ++i) {
      auto spec = read_tensor(r, *arr->get(i), std::string(key) + "[" + std::to_string(i) + "]", is_input);
      if (!spec) return Unexpected{spec.error()};
      if (!names.insert(spec->name).second)
        return r.fail(arr->get(i), std::string(key) + "(" + spec->name + ").name", "duplicate tensor name", "unique names");
      (is_input ? task.inputs : task.outputs).push_back(std::move(*spec));
    }
  }

  return {};
}

/// [shapes]: tune, heldout and gpu.tune; [op_params].
Expected<void> read_shapes(ManifestReader& r, const toml::table& root, Task& task) {
  const toml::node* shapes_node = root.get("shapes");
  if (shapes_node == nullptr || !shapes_node->is_table())
    return r.fail(shapes_node, "shapes", shapes_node ? "must be a table" : "missing", "[shapes] with tune = [...] and heldout = [...]");
  const toml::table& shapes = *shapes_node->as_table();
  if (auto ok = r.only_keys(shapes, "shapes.", {"tune", "heldout", "gpu"}); !ok) return Unexpected{ok.error()};
  auto tune = read_shape_sets(r, shapes, shapes_node, "tune", true);
  if (!tune) return Unexpected{tune.error()};
  task.tune = std::move(*tune);
  auto held = read_shape_sets(r, shapes, shapes_node, "heldout", false);
  if (!held) return Unexpected{held.error()};
  task.heldout = std::move(*held);
  if (const toml::node* gpu = shapes.get("gpu")) {
    if (!gpu->is_table())
      return r.fail(gpu, "shapes.gpu", "must be a table", "[shapes.gpu] with tune = [...]: the tuning shapes on a GPU");
    if (auto ok = r.only_keys(*gpu->as_table(), "shapes.gpu.", {"tune"}); !ok) return Unexpected{ok.error()};
    auto g = read_shape_sets(r, *gpu->as_table(), gpu, "tune", true, "shapes.gpu.");
    if (!g) return Unexpected{g.error()};
    task.tune_gpu = std::move(*g);
  }

  if (const toml::node* op = root.get("op_params")) {
    if (!op->is_table()) return r.fail(op, "op_params", "must be a table", "[op_params] with numbers, e.g. eps = 1e-6");
    for (const auto& [k, v] : *op->as_table()) {
      auto d = v.value<double>();
      if (!d) return r.fail(&v, "op_params." + std::string(k.str()), "must be a number", "e.g. eps = 1e-6");
      task.op_params[std::string(k.str())] = *d;
    }
  }

  return {};
}

/// [reference]: source, and the GPU baseline `cuda`.
Expected<void> read_reference(ManifestReader& r, const toml::table& root, Task& task) {
  std::error_code ec;
  const toml::node* ref = root.get("reference");
  if (ref == nullptr || !ref->is_table())
    return r.fail(ref, "reference", ref ? "must be a table" : "missing", "[reference] with source = \"reference.cpp\"");
  if (auto ok = r.only_keys(*ref->as_table(), "reference.", {"source", "cuda"}); !ok) return Unexpected{ok.error()};
  auto src = r.string_field(*ref->as_table(), ref, "reference.", "source", true);
  if (!src) return Unexpected{src.error()};
  task.reference = task.dir / *src;
  if (!fs::is_regular_file(task.reference, ec))
    return r.fail(ref->as_table()->get("source"), "reference.source",
                  "file " + task.reference.string() + " does not exist",
                  "a C++ file beside task.toml implementing kfab_run");
  auto cuda_src = r.string_field(*ref->as_table(), ref, "reference.", "cuda", false);
  if (!cuda_src) return Unexpected{cuda_src.error()};
  if (!cuda_src->empty()) {
    task.reference_cuda = task.dir / *cuda_src;
    if (!fs::is_regular_file(task.reference_cuda, ec))
      return r.fail(ref->as_table()->get("cuda"), "reference.cuda", "file " + task.reference_cuda.string() + " does not exist",
                    "a .cu file beside task.toml implementing kfab_run on device pointers: the GPU baseline");
  }

  return {};
}

/// [tolerance] and [cost].
Expected<void> read_tolerance_and_cost(ManifestReader& r, const toml::table& root, Task& task) {
  if (const toml::node* tol = root.get("tolerance")) {
    if (!tol->is_table()) return r.fail(tol, "tolerance", "must be a table", "[tolerance] with atol and rtol");
    if (auto ok = r.only_keys(*tol->as_table(), "tolerance.", {"atol", "rtol"}); !ok) return Unexpected{ok.error()};
    for (std::string_view key : {"atol", "rtol"}) {
      auto v = r.number_field(*tol->as_table(), "tolerance.", key);
      if (!v) return Unexpected{v.error()};
      if (v->has_value() && **v < 0.0) return r.fail(tol->as_table()->get(key), "tolerance." + std::string(key), "must not be negative", "a number >= 0");
      (key == "atol" ? task.atol : task.rtol) = *v;
    }
  }

  if (const toml::node* cost = root.get("cost")) {
    if (!cost->is_table()) return r.fail(cost, "cost", "must be a table", "[cost] with flops and bytes expressions");
    if (auto ok = r.only_keys(*cost->as_table(), "cost.", {"flops", "bytes"}); !ok) return Unexpected{ok.error()};
    for (std::string_view key : {"flops", "bytes"}) {
      const toml::node* n = cost->as_table()->get(key);
      if (n == nullptr) continue;
      std::string text;
      if (auto s = n->as_string()) text = s->get();
      else if (auto i = n->as_integer()) text = std::to_string(i->get());
      else return r.fail(n, "cost." + std::string(key), "must be an expression string", "e.g. \"2*M*N*K\"");
      (key == "flops" ? task.cost_flops : task.cost_bytes) = text;
    }
  }

  return {};
}

// Every expression must evaluate in every shape set, to a positive integer for dimensions, and every
// shape must be one a machine could hold: element counts and bytes that overflow 64 bits, or an
// evaluation past kMaxEvaluationBytes, are the task's fault, never a candidate's crash.
Expected<void> check_shape_set(ManifestReader& r, const toml::table& root, const Task& task, const ShapeBinding& b,
                                const std::string& set_name, size_t entry) {
  const std::string where = "shapes." + set_name + "[" + std::to_string(entry) + "] {" + format_binding(b) + "}";
  uint64_t held = 0;  // bytes one evaluation of this shape holds at once
  std::string largest_field;
  uint64_t largest = 0;
  const toml::node* largest_at = nullptr;
  for (const bool is_input : {true, false}) {
    const auto& list = is_input ? task.inputs : task.outputs;
    const char* key = is_input ? "input" : "output";
    for (size_t i = 0; i < list.size(); ++i) {
      const auto& t = list[i];
      const toml::node* at = root[key][i]["shape"].node();
      const std::string field = std::string(key) + "(" + t.name + ").shape";
      int64_t elements = 1;
      for (size_t d = 0; d < t.shape.size(); ++d) {
        const auto& e = t.shape[d];
        auto v = eval_expr(e, b);
        if (!v)
          return r.fail(at, field, v.error().message + " in shapes." + set_name + " {" + format_binding(b) + "}",
                        "bind every shape symbol in every entry of shapes.tune and shapes.heldout");
        if (*v < 1.0 || std::floor(*v) != *v)
          return r.fail(at, field, "\"" + e + "\" is " + std::to_string(*v) + " in shapes." + set_name + " {" + format_binding(b) + "}",
                        "a positive integer");
        if (*v >= 0x1p63)
          return r.fail(at, field + "[" + std::to_string(d) + "]", "\"" + e + "\" is " + fmt_count(*v) + " in " + where +
                            ", past a 64-bit integer", "dimensions below 2^63 whose tensors fit a machine's memory");
        if (__builtin_mul_overflow(elements, static_cast<int64_t>(*v), &elements))
          return r.fail(at, field, "the element count overflows a 64-bit integer in " + where + " (at dimension " +
                            std::to_string(d) + ", \"" + e + "\")",
                        "shapes whose tensors fit a machine's memory (at most " + fmt_bytes(kMaxEvaluationBytes) + " an evaluation)");
      }
      uint64_t bytes = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(elements), static_cast<uint64_t>(dtype_size(t.dtype)), &bytes) ||
          __builtin_add_overflow(held, bytes, &held) || __builtin_add_overflow(held, bytes, &held))
        return r.fail(at, field, fmt_count(static_cast<double>(elements)) + " elements in " + where + ": the bytes overflow 64 bits",
                      "shapes whose tensors fit a machine's memory (at most " + fmt_bytes(kMaxEvaluationBytes) + " an evaluation)");
      if (bytes > largest) {
        largest = bytes;
        largest_field = field;
        largest_at = at;
      }
    }
  }
  if (held > kMaxEvaluationBytes)
    return r.fail(largest_at, largest_field,
                  fmt_bytes(largest) + " in " + where + "; one evaluation of the shape holds " + fmt_bytes(held) +
                      " (the inputs and their snapshot, the candidate's and the reference's outputs), past kfab's limit of " +
                      fmt_bytes(kMaxEvaluationBytes),
                  "shapes whose tensors fit a machine's memory");
  for (const auto& [key, text] : {std::pair<std::string, std::string>{"flops", task.cost_flops}, {"bytes", task.cost_bytes}}) {
    if (text.empty()) continue;
    auto v = eval_expr(text, b);
    if (!v)
      return r.fail(root["cost"][key].node(), "cost." + key, v.error().message + " in shapes." + set_name + " {" + format_binding(b) + "}",
                    "an expression of the shape symbols");
  }
  return {};
}

}  // namespace

Expected<Task> load_task(const fs::path& path) {
  fs::path manifest = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) manifest = path / "task.toml";
  if (!fs::exists(manifest, ec))
    return make_error(manifest.string() + ": no such task manifest",
                      "give a task folder holding task.toml, or the task.toml itself");
  ManifestReader r(manifest);

  toml::table root;
  try {
    root = toml::parse_file(manifest.string());
  } catch (const toml::parse_error& e) {
    return make_error(manifest.string() + ":" + std::to_string(e.source().begin.line) + ":" +
                          std::to_string(e.source().begin.column) + ": not valid TOML: " +
                          std::string(e.description()));
  }

  if (auto ok = r.only_keys(root, "", {"name", "summary", "op_class", "input", "output", "shapes", "reference", "tolerance", "cost", "op_params", "formula"}); !ok)
    return Unexpected{ok.error()};

  Task task;
  task.manifest = fs::absolute(manifest);
  task.dir = task.manifest.parent_path();

  auto name = r.string_field(root, nullptr, "", "name", true);
  if (!name) return Unexpected{name.error()};
  if (name->empty()) return r.fail(root.get("name"), "name", "must not be empty", "a non-empty string");
  task.name = *name;
  auto summary = r.string_field(root, nullptr, "", "summary", false);
  if (!summary) return Unexpected{summary.error()};
  task.summary = *summary;
  auto op = r.string_field(root, nullptr, "", "op_class", false);
  if (!op) return Unexpected{op.error()};
  task.op_class = *op;
  auto formula = r.string_field(root, nullptr, "", "formula", false);
  if (!formula) return Unexpected{formula.error()};
  task.formula = *formula;

  if (auto ok = read_tensors(r, root, task); !ok) return Unexpected{ok.error()};
  if (auto ok = read_shapes(r, root, task); !ok) return Unexpected{ok.error()};
  if (auto ok = read_reference(r, root, task); !ok) return Unexpected{ok.error()};
  if (auto ok = read_tolerance_and_cost(r, root, task); !ok) return Unexpected{ok.error()};
  for (size_t i = 0; i < task.tune.size(); ++i)
    if (auto ok = check_shape_set(r, root, task, task.tune[i], "tune", i); !ok) return Unexpected{ok.error()};
  for (size_t i = 0; i < task.heldout.size(); ++i)
    if (auto ok = check_shape_set(r, root, task, task.heldout[i], "heldout", i); !ok) return Unexpected{ok.error()};
  for (size_t i = 0; i < task.tune_gpu.size(); ++i)
    if (auto ok = check_shape_set(r, root, task, task.tune_gpu[i], "gpu.tune", i); !ok) return Unexpected{ok.error()};
  return task;
}

uint64_t evaluation_bytes(const Task& task, const ShapeBinding& b) {
  uint64_t held = 0;
  for (const auto* list : {&task.inputs, &task.outputs})
    for (const auto& t : *list) {
      uint64_t bytes = dtype_size(t.dtype);
      for (int64_t d : task.dims(t, b)) bytes *= static_cast<uint64_t>(d);  // no overflow: checked at load time
      held += 2 * bytes;
    }
  return held;
}

Expected<void> check_fits(const Task& task, uint64_t bytes_available, const FitScope& scope) {
  struct Set {
    const char* name;
    const std::vector<ShapeBinding>* shapes;
  };
  std::vector<Set> sets = {{scope.gpu && !task.tune_gpu.empty() ? "gpu.tune" : "tune", &task.tune_for(scope.gpu)}};
  if (scope.heldout) sets.push_back({"heldout", &task.heldout});
  for (const auto& set : sets) {
    for (size_t i = 0; i < set.shapes->size(); ++i) {
      const ShapeBinding& b = (*set.shapes)[i];
      const uint64_t held = evaluation_bytes(task, b);
      if (held <= bytes_available) continue;
      std::string largest;
      uint64_t largest_bytes = 0;
      for (const bool is_input : {true, false})
        for (const auto& t : is_input ? task.inputs : task.outputs) {
          uint64_t bytes = dtype_size(t.dtype);
          for (int64_t d : task.dims(t, b)) bytes *= static_cast<uint64_t>(d);
          if (bytes <= largest_bytes) continue;
          largest_bytes = bytes;
          largest = std::string(is_input ? "input" : "output") + "(" + t.name + ").shape";
        }
      // Held-out shapes are never shown to a proposer: their entry is named, not their sizes.
      const std::string entry = std::string("shapes.") + set.name + "[" + std::to_string(i) + "]" +
                                (std::string_view(set.name) == "heldout" ? "" : " {" + format_binding(b) + "}");
      return make_error(task.manifest.string() + ": " + largest + ": " + fmt_bytes(largest_bytes) + " in " + entry +
                            "; one evaluation of the shape holds " + fmt_bytes(held) +
                            " (the inputs and their snapshot, the candidate's and the reference's outputs), more than the " +
                            fmt_bytes(bytes_available) + " " + scope.limit,
                        "shapes that fit " + fmt_bytes(bytes_available) + scope.remedy);
    }
  }
  return {};
}

Expected<LoadedTask> open_task(const fs::path& path) {
  std::error_code ec;
  if (path.extension() == ".py") {
    if (!fs::is_regular_file(path, ec)) return make_error(path.string() + ": no such task file", "give a KernelBench-format .py file");
    LoadedTask lt;
    lt.format = TaskFormat::KernelBench;
    lt.path = path;
    lt.task.name = path.stem().string();
    lt.task.dir = fs::absolute(path);
    lt.task.manifest = lt.task.dir;
    lt.task.reference = lt.task.dir;
    return lt;
  }
  auto t = load_task(path);
  if (!t) return Unexpected{t.error()};
  return loaded_native(std::move(*t), path);
}

LoadedTask loaded_native(Task task, fs::path path) {
  LoadedTask lt;
  lt.format = TaskFormat::Native;
  lt.path = std::move(path);
  lt.task = std::move(task);
  return lt;
}

}  // namespace kfab
