// The torch extension through which an exported ModelNew (python/kfab_worker/export.py) calls a native
// candidate: built once per machine and torch, loaded like any extension and shared by every exported
// ModelNew. It dlopens the candidate's library and hands the tensors' pointers, shapes and strides to
// kfab_run (include/kfab/candidate.h) with no Python in between.
//
// torch's pybind11 header (the Tensor's type caster and pybind11's STL casters), not torch/extension.h:
// that one pulls in the whole C++ frontend, and a first end-to-end timing on a machine waited 28 s for
// g++ where this one takes 8 (this machine's g++ 12, torch 2.11).
#include <torch/csrc/utils/pybind.h>

#include <dlfcn.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kfab/candidate.h"

namespace {

using RunFn = int (*)(const kfab_tensor*, int32_t, kfab_tensor*, int32_t, void*);
using InitFn = int (*)(const double*, int32_t);

struct Library {
  RunFn run;
  InitFn init;  // optional: see candidate.h
};
std::vector<Library> libraries;

kfab_dtype code(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return KFAB_F32;
    case at::kHalf: return KFAB_F16;
    case at::kBFloat16: return KFAB_BF16;
    case at::kDouble: return KFAB_F64;
    case at::kInt: return KFAB_I32;
    case at::kLong: return KFAB_I64;
    case at::kChar: return KFAB_I8;
    case at::kByte: return KFAB_U8;
    case at::kBool: return KFAB_BOOL;
    default: throw std::invalid_argument(std::string("no kfab dtype for ") + c10::toString(t));
  }
}

// The views point into the tensors' own size and stride arrays: valid while the caller holds them.
std::vector<kfab_tensor> views(const std::vector<at::Tensor>& ts) {
  std::vector<kfab_tensor> out(ts.size());
  for (size_t i = 0; i < ts.size(); ++i)
    out[i] = {ts[i].data_ptr(), code(ts[i].scalar_type()), static_cast<int32_t>(ts[i].dim()), ts[i].sizes().data(),
              ts[i].strides().data()};
  return out;
}

const Library& library(int64_t id) {
  if (id < 0 || id >= static_cast<int64_t>(libraries.size())) throw std::out_of_range("no such candidate library");
  return libraries[static_cast<size_t>(id)];
}

int64_t load(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) throw std::runtime_error(std::string("cannot load the candidate: ") + dlerror());
  auto run = reinterpret_cast<RunFn>(dlsym(h, "kfab_run"));
  if (run == nullptr) throw std::runtime_error(path + " exports no kfab_run");
  libraries.push_back({run, reinterpret_cast<InitFn>(dlsym(h, "kfab_init"))});
  return static_cast<int64_t>(libraries.size()) - 1;
}

int64_t init(int64_t id, const std::vector<double>& numbers) {
  const Library& l = library(id);
  return l.init == nullptr ? 0 : l.init(numbers.data(), static_cast<int32_t>(numbers.size()));
}

int64_t run(int64_t id, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs, int64_t stream) {
  const Library& l = library(id);
  std::vector<kfab_tensor> a = views(inputs), b = views(outputs);
  return l.run(a.data(), static_cast<int32_t>(a.size()), b.data(), static_cast<int32_t>(b.size()),
               reinterpret_cast<void*>(stream));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("load", &load, "dlopen a kfab candidate library; returns its id");
  m.def("init", &init, "kfab_init with the Model's init numbers (0 where the candidate has none)");
  m.def("run", &run, "kfab_run on the tensors (stream: a cudaStream_t as an integer, 0 on the CPU)");
}
