// Fused row programs for native tasks (their manifest's `formula`) and the template that puts the
// generated kernels in the tuner's search.
#include "tuner/fused.h"

#include <fmt/format.h>

#include <algorithm>

namespace kfab {

Expected<Program> task_program(const Task& task) {
  if (task.formula.empty()) return make_error("task " + task.name + " has no formula");
  const TensorSpec* main = nullptr;
  for (const auto& in : task.inputs)
    if (in.dtype == DType::F32 && (main == nullptr || in.shape.size() > main->shape.size())) main = &in;
  if (main == nullptr || main->shape.empty()) return make_error("task " + task.name + " has no f32 input with dimensions to set the row shape");
  const auto& s = main->shape;
  const std::vector<std::string> lead(s.begin(), s.end() - 1);
  auto cls_of = [&](const TensorSpec& t) -> Expected<VClass> {
    if (t.shape == s) return VClass::E;
    if (t.shape.empty() || (t.shape.size() == 1 && t.shape[0] == "1")) return VClass::K;
    if (t.shape.size() == 1 && t.shape[0] == s.back()) return VClass::C;
    auto keep = lead;
    keep.push_back("1");
    if (t.shape == lead || t.shape == keep) return VClass::R;
    return make_error(fmt::format("{}'s shape is neither the row shape of {}, one row, one column nor a scalar", t.name, main->name));
  };
  std::vector<PInput> ins;
  for (const auto& in : task.inputs) {
    auto c = cls_of(in);
    if (!c) return Unexpected{c.error()};
    if (in.dtype != DType::F32 && in.dtype != DType::I64 && in.dtype != DType::I32)
      return make_error(fmt::format("{} is {}: fused programs take f32 values and i64/i32 indices", in.name, dtype_name(in.dtype)));
    ins.push_back({in.name, *c, in.dtype != DType::F32, in.dtype == DType::I32});
  }
  std::vector<std::string> outs;
  for (const auto& o : task.outputs) {
    if (o.dtype != DType::F32) return make_error(o.name + " is not f32: fused programs write f32 outputs");
    outs.push_back(o.name);
  }
  auto p = parse_program(task.formula, ins, outs, task.op_params);
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

const KernelTemplate kFusedCuda{"cuda_fused_rows", "cuda", 2, cuda_applies, cuda_grid, cuda_generate};

std::vector<TemplateParams> cpu_grid(const Task&) { return fused_cpu_grid(); }

std::string cpu_generate(const Task& t, const TemplateParams& params) {
  auto p = task_program(t);
  return p ? generate_fused_cpp(*p, params, "fused row program for " + t.name) : "#error the task's formula no longer parses\n";
}

const KernelTemplate kFusedCpu{"cpu_fused_rows", "cpu", 1, cuda_applies, cpu_grid, cpu_generate};

}  // namespace

const KernelTemplate& fused_cuda_template() { return kFusedCuda; }
const KernelTemplate& fused_cpu_template() { return kFusedCpu; }

}  // namespace kfab
