// Fused row programs for native tasks (their manifest's `formula`) and the template that puts the
// generated kernels in the tuner's search.
#include "tuner/fused.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>

namespace kfab {

namespace {

// A tensor's class relative to the symbolic row shape s (named after the tensor that has it).
Expected<VClass> shape_class(const TensorSpec& t, const std::vector<std::string>& s, const std::string& main) {
  const std::vector<std::string> lead(s.begin(), s.end() - 1);
  if (t.shape == s) return VClass::E;
  if (t.shape.empty() || (t.shape.size() == 1 && t.shape[0] == "1")) return VClass::K;
  if (t.shape.size() == 1 && t.shape[0] == s.back()) return VClass::C;
  auto keep = lead;
  keep.push_back("1");
  if (t.shape == lead || t.shape == keep) return VClass::R;
  return make_error(fmt::format("{}'s shape is neither the row shape of {}, one row, one column nor a scalar", t.name, main));
}

// The epilogue inputs' and outputs' checks shared by task_program and task_gemm.
Expected<Program> parse_task_formula(const Task& task, const std::string& formula, const std::vector<PInput>& ins,
                                     const std::function<Expected<VClass>(const TensorSpec&)>& cls_of) {
  std::vector<std::string> outs;
  for (const auto& o : task.outputs) {
    if (o.dtype != DType::F32) return make_error(o.name + " is not f32: fused programs write f32 outputs");
    outs.push_back(o.name);
  }
  auto p = parse_program(formula, ins, outs, task.op_params);
  if (!p) return Unexpected{p.error()};
  for (size_t j = 0; j < task.outputs.size(); ++j) {
    auto c = cls_of(task.outputs[j]);
    if (!c) return Unexpected{c.error()};
    if (*c != p->nodes[p->outputs[j].second].cls)
      return make_error(fmt::format("the formula makes {} a {}-class value, but its shape says {}", outs[j],
                                    vclass_letter(p->nodes[p->outputs[j].second].cls), vclass_letter(*c)));
  }
  if (auto ok = fused_supported(*p); !ok) return Unexpected{ok.error()};
  return p;
}

Expected<PInput> program_input(const TensorSpec& in, VClass c) {
  if (in.dtype != DType::F32 && in.dtype != DType::I64 && in.dtype != DType::I32)
    return make_error(fmt::format("{} is {}: fused programs take f32 values and i64/i32 indices", in.name, dtype_name(in.dtype)));
  return PInput{in.name, c, in.dtype != DType::F32, in.dtype == DType::I32};
}

}  // namespace

Expected<Program> task_program(const Task& task) {
  if (task.formula.empty()) return make_error("task " + task.name + " has no formula");
  const TensorSpec* main = nullptr;
  for (const auto& in : task.inputs)
    if (in.dtype == DType::F32 && (main == nullptr || in.shape.size() > main->shape.size())) main = &in;
  if (main == nullptr || main->shape.empty()) return make_error("task " + task.name + " has no f32 input with dimensions to set the row shape");
  const auto& s = main->shape;
  auto cls_of = [&](const TensorSpec& t) { return shape_class(t, s, main->name); };
  std::vector<PInput> ins;
  for (const auto& in : task.inputs) {
    auto c = cls_of(in);
    if (!c) return Unexpected{c.error()};
    auto pi = program_input(in, *c);
    if (!pi) return Unexpected{pi.error()};
    ins.push_back(*pi);
  }
  return parse_task_formula(task, task.formula, ins, cls_of);
}

Expected<GemmProgram> task_gemm(const Task& task) {
  if (task.op_class != "matmul" && task.op_class != "matmul_epilogue")
    return make_error("task " + task.name + " is not of op class matmul or matmul_epilogue");
  if (task.inputs.size() < 2 || task.outputs.empty()) return make_error("a GEMM task has inputs A and B and an output");
  const TensorSpec& a = task.inputs[0];
  const TensorSpec& b = task.inputs[1];
  const bool half = a.dtype == DType::F16 || a.dtype == DType::BF16;
  if ((a.dtype != DType::F32 && !half) || b.dtype != a.dtype || a.shape.size() != 2 || b.shape.size() != 2)
    return make_error("a GEMM task's first two inputs are 2-D matrices, both f32, both f16 or both bf16");
  GemmProgram gp;
  gp.tensors = static_cast<int>(task.inputs.size());
  gp.trans_b = b.shape[0] != a.shape[1];
  if (gp.trans_b && b.shape[1] != a.shape[1])
    return make_error(fmt::format("{} [{}] and {} [{}] share no inner dimension", a.name, fmt::join(a.shape, ", "), b.name, fmt::join(b.shape, ", ")));
  const std::vector<std::string> s = {a.shape[0], gp.trans_b ? b.shape[0] : b.shape[1]};
  if (half) {  // a plain product on 16-bit tensor cores: C = A @ B in the operands' type, nothing after it
    const auto& out = task.outputs;
    if (task.inputs.size() != 2 || out.size() != 1 || !task.formula.empty() || out[0].dtype != a.dtype || out[0].shape != s)
      return make_error(fmt::format("a {} GEMM task is a plain product: inputs A and B, one {} output [{}], no formula (epilogues take f32 only)",
                                    dtype_name(a.dtype), dtype_name(a.dtype), fmt::join(s, ", ")));
    gp.dtype = a.dtype;
    gp.bind = {-1};
    auto p = parse_program(out[0].name + " = acc", {{"acc", VClass::E, false, false}}, {out[0].name}, task.op_params);
    if (!p) return Unexpected{p.error()};
    gp.epilogue = std::move(*p);
    return gp;
  }
  auto cls_of = [&](const TensorSpec& t) { return shape_class(t, s, "the product"); };
  std::vector<PInput> ins;
  for (size_t i = 2; i < task.inputs.size(); ++i) {
    auto c = cls_of(task.inputs[i]);
    if (!c) return Unexpected{c.error()};
    auto pi = program_input(task.inputs[i], *c);
    if (!pi) return Unexpected{pi.error()};
    ins.push_back(*pi);
    gp.bind.push_back(static_cast<int>(i));
  }
  ins.push_back({"acc", VClass::E, false, false});
  gp.bind.push_back(-1);
  std::string formula = task.formula;
  if (formula.empty()) {
    if (task.op_class != "matmul" || task.outputs.size() != 1) return make_error("task " + task.name + " has no formula over acc (the product)");
    formula = task.outputs[0].name + " = acc";
  }
  auto p = parse_task_formula(task, formula, ins, cls_of);
  if (!p) return Unexpected{p.error()};
  gp.epilogue = std::move(*p);
  return gp;
}

namespace {

bool cuda_applies(const Task& t) { return !t.formula.empty() && task_program(t).has_value(); }

std::vector<TemplateParams> cuda_grid(const Task& t) {
  auto p = task_program(t);
  if (!p) return {};
  // the union of the grids for the row lengths of the tuning shapes on a GPU
  const TensorSpec* main = nullptr;
  for (const auto& in : t.inputs)
    if (in.dtype == DType::F32 && (main == nullptr || in.shape.size() > main->shape.size())) main = &in;
  std::vector<int64_t> lengths;
  if (main != nullptr && !main->shape.empty())
    for (const auto& shape : t.tune_for(true))
      if (auto v = eval_expr(main->shape.back(), shape)) lengths.push_back(static_cast<int64_t>(*v));
  if (lengths.empty()) lengths.push_back(1024);
  // interleaved, so that a small point budget still tries the best guess for every length
  std::vector<std::vector<TemplateParams>> grids;
  for (int64_t n : lengths) grids.push_back(fused_grid(*p, n));
  std::vector<TemplateParams> out;
  for (size_t k = 0;; ++k) {
    bool any = false;
    for (const auto& g : grids)
      if (k < g.size()) {
        any = true;
        if (std::find(out.begin(), out.end(), g[k]) == out.end()) out.push_back(g[k]);
      }
    if (!any) return out;
  }
}

std::string cuda_generate(const Task& t, const TemplateParams& params) {
  auto p = task_program(t);
  return p ? generate_fused_cuda(*p, params, "fused row program for " + t.name) : "#error the task's formula no longer parses\n";
}

const KernelTemplate kFusedCuda{"cuda_fused_rows", "cuda", 8, cuda_applies, cuda_grid, cuda_generate};

std::vector<TemplateParams> cpu_grid(const Task& t) {
  auto p = task_program(t);
  return p ? fused_cpu_grid(*p) : fused_cpu_grid();
}

std::string cpu_generate(const Task& t, const TemplateParams& params) {
  auto p = task_program(t);
  return p ? generate_fused_cpp(*p, params, "fused row program for " + t.name) : "#error the task's formula no longer parses\n";
}

const KernelTemplate kFusedCpu{"cpu_fused_rows", "cpu", 4, cuda_applies, cpu_grid, cpu_generate};

bool gemm_applies(const Task& t) { return task_gemm(t).has_value(); }
std::vector<TemplateParams> gemm_cuda_task_grid(const Task& t) {
  auto g = task_gemm(t);
  return g ? gemm_cuda_grid(*g) : std::vector<TemplateParams>{};
}
std::vector<TemplateParams> gemm_cpu_task_grid(const Task& t) {
  auto g = task_gemm(t);
  return g ? gemm_cpu_grid(*g) : std::vector<TemplateParams>{};
}
// the cpu target's blocked GEMM reads and writes f32 only
bool gemm_cpu_applies(const Task& t) {
  auto g = task_gemm(t);
  return g && g->dtype == DType::F32;
}

std::string gemm_cuda_generate(const Task& t, const TemplateParams& params) {
  auto g = task_gemm(t);
  return g ? generate_gemm_cuda(*g, params, "GEMM + epilogue for " + t.name) : "#error the task no longer states a GEMM\n";
}
std::string gemm_cpu_generate(const Task& t, const TemplateParams& params) {
  auto g = task_gemm(t);
  return g ? generate_gemm_cpp(*g, params, "GEMM + epilogue for " + t.name) : "#error the task no longer states a GEMM\n";
}

const KernelTemplate kGemmCuda{"cuda_gemm_epilogue", "cuda", 8, gemm_applies, gemm_cuda_task_grid, gemm_cuda_generate};
const KernelTemplate kGemmCpu{"cpu_gemm_epilogue", "cpu", 6, gemm_cpu_applies, gemm_cpu_task_grid, gemm_cpu_generate};

}  // namespace

const KernelTemplate& gemm_cuda_template() { return kGemmCuda; }
const KernelTemplate& gemm_cpu_template() { return kGemmCpu; }
const KernelTemplate& fused_cuda_template() { return kFusedCuda; }
const KernelTemplate& fused_cpu_template() { return kFusedCpu; }

namespace {
const Printer kCudaPrinter{"cuda",
                           fused_cuda_template,
                           gemm_cuda_template,
                           fused_grid,
                           generate_fused_cuda,
                           gemm_cuda_grid,
                           generate_gemm_cuda,
                           {{"scan", "cuda_row_scan"},
                            {"dim_reduce", "cuda_dim_reduce"},
                            {"transpose", "cuda_tiled_transpose"},
                            {"group_norm", "cuda_group_norm"},
                            {"pool", "cuda_pool"}}};
const Printer kCppPrinter{"cpu",
                          fused_cpu_template,
                          gemm_cpu_template,
                          [](const Program& p, int64_t) { return fused_cpu_grid(p); },
                          generate_fused_cpp,
                          gemm_cpu_grid,
                          generate_gemm_cpp,
                          {{"scan", "cpu_rowwise_cumsum"},
                           {"dim_reduce", "cpu_dim_reduce"},
                           {"transpose", "cpu_tiled_transpose"},
                           {"group_norm", "cpu_group_norm"},
                           {"pool", "cpu_pool"}}};
const Printer* const kPrinters[] = {&kCudaPrinter, &kCppPrinter};
}  // namespace

const Printer* printer_for(std::string_view target) {
  for (const Printer* p : kPrinters)
    if (p->target == target) return p;
  return nullptr;
}

std::string printer_targets() {
  std::string out;
  for (const Printer* p : kPrinters) out += (out.empty() ? "" : " or ") + std::string(p->target);
  return out;
}

}  // namespace kfab
