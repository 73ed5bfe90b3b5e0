#include "runner/jobs.h"

#include <dlfcn.h>
#include <omp.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "core/task.h"
#include "core/tensor.h"
#include "eval/compare.h"
#include "eval/stats.h"
#include "runner/accelerator.h"
#include "runner/cuda_driver.h"

namespace kfab::runner {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using RunFn = int (*)(const kfab_tensor*, int32_t, kfab_tensor*, int32_t, void*);

namespace {

/// A failure that ends the job with a disposition (runtime_failed, rejected, ...).
struct JobFailure {
  std::string kind;
  std::string detail;
  bool fatal = false;  ///< the runner cannot go on (a lost CUDA context): kfab replaces it
};

json failure(const std::string& kind, const std::string& detail, bool fatal = false) {
  json j = {{"ok", false}, {"kind", kind}, {"detail", detail}};
  if (fatal) j["fatal"] = true;
  return j;
}

// Libraries stay loaded for the runner's life: a runner serves one candidate and its reference.
std::map<std::string, RunFn> g_loaded;

std::string load(const std::string& path, RunFn* fn) {
  if (auto it = g_loaded.find(path); it != g_loaded.end()) {
    *fn = it->second;
    return {};
  }
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return std::string("cannot load ") + path + ": " + ::dlerror();
  auto* sym = reinterpret_cast<RunFn>(::dlsym(h, "kfab_run"));
  if (sym == nullptr)
    return "the shared object does not export kfab_run (declare it with KFAB_EXPORT, as in kfab/candidate.h)";
  g_loaded[path] = sym;
  *fn = sym;
  return {};
}

std::map<std::string, Task> g_tasks;

/// Everything a job needs: the task, both entry points and the buffers of one shape.
struct Setup {
  const Task* task = nullptr;
  RunFn candidate = nullptr;
  RunFn reference = nullptr;
  ShapeBinding shape;
  std::vector<HostTensor> inputs;
  std::vector<HostTensor> snapshot;
  std::vector<HostTensor> cand_out;
  std::vector<HostTensor> ref_out;
  std::vector<kfab_tensor> in_views, cand_views, ref_views;
  // Device targets (cuda, opencl): the candidate works on device copies; the reference stays the
  // CPU oracle.
  Accelerator* dev = nullptr;
  bool cuda = false;
  std::vector<void*> d_in, d_out;
  std::vector<kfab_tensor> d_in_views, d_out_views;
  RunFn gpu_baseline = nullptr;  ///< the task's reference.cu, timed instead of the CPU reference
  std::vector<void*> d_base;
  std::vector<kfab_tensor> d_base_views;
  /// The reference's answer is kept XOR-ed with this job's random key while a candidate could run:
  /// a candidate that searches the runner's memory for it (it can compute a few elements and look
  /// for them) finds nothing. Unsealed only to compare.
  uint64_t ref_key = std::random_device{}() | (uint64_t{std::random_device{}()} << 32) | 1;
  bool ref_sealed = false;
  int64_t last_seed = 0;

  Setup() = default;
  Setup(const Setup&) = delete;
  Setup& operator=(const Setup&) = delete;
  ~Setup() {
    // Freed memory keeps its bytes: no answer is left behind for a later job's candidate to find.
    for (auto* list : {&cand_out, &ref_out})
      for (auto& t : *list) t.poison(0x00);
    if (dev == nullptr) return;
    for (auto* list : {&d_in, &d_out, &d_base})
      for (void* p : *list) dev->release(p);
  }
};

/// A device call's result: a failure that names the error. Errors the device cannot recover from
/// (a CUDA kernel fault loses the context) end this runner; kfab starts another.
void dev_check(Setup& s, int rc, const std::string& what) {
  if (rc != 0) throw JobFailure{"crashed", what + ": " + s.dev->error(rc), s.dev->fatal(rc)};
}

std::optional<json> prepare(const json& req, Setup& s) {
  const std::string task_path = req.at("task").get<std::string>();
  auto it = g_tasks.find(task_path);
  if (it == g_tasks.end()) {
    auto t = load_task(task_path);
    if (!t) return failure("task_error", t.error().to_string());
    it = g_tasks.emplace(task_path, std::move(*t)).first;
  }
  s.task = &it->second;
  if (auto e = load(req.at("candidate").get<std::string>(), &s.candidate); !e.empty())
    return failure("load_failed", e);
  if (auto e = load(req.at("reference").get<std::string>(), &s.reference); !e.empty())
    return failure("reference_failed", "reference: " + e);
  for (const auto& [k, v] : req.at("shape").items()) s.shape[k] = v.get<int64_t>();
  for (const auto& in : s.task->inputs) {
    s.inputs.emplace_back(in.dtype, s.task->dims(in, s.shape));
    s.snapshot.emplace_back(in.dtype, s.task->dims(in, s.shape));
  }
  for (const auto& out : s.task->outputs) {
    s.cand_out.emplace_back(out.dtype, s.task->dims(out, s.shape));
    s.ref_out.emplace_back(out.dtype, s.task->dims(out, s.shape));
  }
  for (auto& t : s.inputs) s.in_views.push_back(t.view());
  for (auto& t : s.cand_out) s.cand_views.push_back(t.view());
  for (auto& t : s.ref_out) s.ref_views.push_back(t.view());
  const std::string target = req.value("target", "cpu");
  s.cuda = target == "cuda";
  if (target != "cpu") {
    s.dev = accelerator(target);
    if (s.dev == nullptr) return failure("protocol_error", "unknown target " + target);
    if (auto e = s.dev->open(); !e.empty()) return failure("device_error", e);
    auto mirror = [&](std::vector<HostTensor>& host, std::vector<kfab_tensor>& views, std::vector<void*>& handles,
                      std::vector<kfab_tensor>& dviews) {
      for (size_t i = 0; i < host.size(); ++i) {
        void* p = nullptr;
        dev_check(s, s.dev->alloc(&p, host[i].nbytes()), "device allocation");
        handles.push_back(p);
        kfab_tensor v = views[i];
        v.data = p;
        dviews.push_back(v);
      }
    };
    mirror(s.inputs, s.in_views, s.d_in, s.d_in_views);
    mirror(s.cand_out, s.cand_views, s.d_out, s.d_out_views);
    if (const std::string b = req.value("gpu_baseline", ""); !b.empty()) {
      if (auto e = load(b, &s.gpu_baseline); !e.empty()) return failure("reference_failed", "GPU baseline: " + e);
      mirror(s.ref_out, s.ref_views, s.d_base, s.d_base_views);
    }
  }
  return std::nullopt;
}

void fill_inputs(Setup& s, uint64_t base_seed, int64_t seed) {
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    s.inputs[i].fill(s.task->inputs[i].init, derive_seed(base_seed, static_cast<uint64_t>(seed), i));
    std::memcpy(s.snapshot[i].data(), s.inputs[i].data(), s.inputs[i].nbytes());
    if (s.dev) dev_check(s, s.dev->upload(s.d_in[i], s.inputs[i].data(), s.inputs[i].nbytes()), "upload of an input");
  }
}

/// Which input changed, and where; empty when none did.
std::string input_change(const Setup& s) {
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    if (std::memcmp(s.inputs[i].data(), s.snapshot[i].data(), s.inputs[i].nbytes()) == 0) continue;
    size_t first = 0;
    while (first < s.inputs[i].numel() && s.inputs[i].at(first) == s.snapshot[i].at(first)) ++first;
    return "input " + s.task->inputs[i].name + " was modified (first change at element " + std::to_string(first) + ")";
  }
  return {};
}

void call(RunFn fn, Setup& s, std::vector<kfab_tensor>& outs, const char* who) {
  int rc;
  try {
    const bool on_device = s.dev && (&outs == &s.d_out_views || &outs == &s.d_base_views);
    auto& ins = on_device ? s.d_in_views : s.in_views;
    rc = fn(ins.data(), static_cast<int32_t>(ins.size()), outs.data(), static_cast<int32_t>(outs.size()),
            on_device ? s.dev->stream() : nullptr);
  } catch (const std::bad_alloc&) {
    throw JobFailure{"crashed", std::string(who) + " ran out of memory (std::bad_alloc under the runner's address-space limit)"};
  } catch (const std::exception& e) {
    throw JobFailure{"crashed", std::string(who) + " threw an exception: " + e.what()};
  } catch (...) {
    throw JobFailure{"crashed", std::string(who) + " threw an exception"};
  }
  if (rc != 0) throw JobFailure{"runtime_failed", std::string(who) + " returned " + std::to_string(rc)};
}

/// Poisons the candidate's outputs on the device, where they are: NaN (every byte 0xff) for floats,
/// the byte `pattern` for integers. A memset on the stream, no host copy.
void poison_device(Setup& s, unsigned char pattern) {
  for (size_t i = 0; i < s.cand_out.size(); ++i)
    dev_check(s, s.dev->fill(s.d_out[i], dtype_is_float(s.cand_out[i].dtype()) ? 0xff : pattern, s.cand_out[i].nbytes()),
              "poison of an output");
}

/// The candidate's outputs are poisoned with `pattern` (HostTensor::poison; on a device,
/// poison_device), it is called, and the inputs must not have changed. On a device the outputs and
/// the inputs come back to the host after the call.
void call_candidate(Setup& s, unsigned char pattern) {
  if (!s.dev) {
    for (auto& o : s.cand_out) o.poison(pattern);
    call(s.candidate, s, s.cand_views, "kfab_run");
    if (auto c = input_change(s); !c.empty()) throw JobFailure{"rejected", c};
    return;
  }
  Accelerator& dev = *s.dev;
  poison_device(s, pattern);
  call(s.candidate, s, s.d_out_views, "kfab_run");
  dev_check(s, dev.synchronize(), "after kfab_run");
  for (size_t i = 0; i < s.cand_out.size(); ++i)
    dev_check(s, dev.download(s.cand_out[i].data(), s.d_out[i], s.cand_out[i].nbytes()), "download of an output");
  for (size_t i = 0; i < s.inputs.size(); ++i)
    dev_check(s, dev.download(s.inputs[i].data(), s.d_in[i], s.inputs[i].nbytes()), "download of an input");
  if (auto c = input_change(s); !c.empty()) throw JobFailure{"rejected", c};
}

/// XORs tensors with a key: seals an open answer, opens a sealed one.
void xor_with(std::vector<HostTensor>& v, uint64_t key) {
  for (auto& t : v) {
    auto* b = static_cast<unsigned char*>(t.data());
    const size_t n = t.nbytes(), words = n / 8;
    for (size_t i = 0; i < words; ++i) {
      uint64_t w;
      std::memcpy(&w, b + 8 * i, 8);
      w ^= key;
      std::memcpy(b + 8 * i, &w, 8);
    }
    for (size_t i = 8 * words; i < n; ++i) b[i] ^= static_cast<unsigned char>(key >> (8 * (i % 8)));
  }
}
void toggle_seal(Setup& s) {
  xor_with(s.ref_out, s.ref_key);
  s.ref_sealed = !s.ref_sealed;
}
void seal(Setup& s) {
  if (!s.ref_sealed) toggle_seal(s);
}
/// Opens the reference's answer for a comparison; seals it again when it goes out of scope.
struct Unsealed {
  Setup& s;
  explicit Unsealed(Setup& setup) : s(setup) {
    if (s.ref_sealed) toggle_seal(s);
  }
  ~Unsealed() { seal(s); }
  Unsealed(const Unsealed&) = delete;
  Unsealed& operator=(const Unsealed&) = delete;
};

/// Runs the reference: it overwrites its outputs, so they count as open until sealed after it.
void raw_reference(Setup& s) {
  s.ref_sealed = false;
  call(s.reference, s, s.ref_views, "reference");
}

void call_reference(Setup& s) {
  try {
    raw_reference(s);
  } catch (JobFailure& f) {
    throw JobFailure{"reference_failed", f.detail};
  }
  seal(s);
  if (auto c = input_change(s); !c.empty()) throw JobFailure{"reference_failed", "the reference modified an input: " + c};
}

json verify(const json& req) {
  Setup s;
  if (auto f = prepare(req, s)) return *f;
  const auto base_seed = req.at("base_seed").get<uint64_t>();
  std::vector<CompareStats> stats(s.task->outputs.size());
  for (const auto& seed_j : req.at("seeds")) {
    const auto seed = seed_j.get<int64_t>();
    s.last_seed = seed;
    fill_inputs(s, base_seed, seed);
    // Candidate, reference, candidate: the second call must not profit from what the reference
    // left behind, and both must have written every element (the outputs are poisoned before each).
    call_candidate(s, 0x5a);
    // The first answer is kept sealed too while the candidate runs again: any right answer left in
    // the runner's memory is one a candidate could find and copy.
    std::vector<HostTensor> first;
    for (auto& o : s.cand_out) {
      first.emplace_back(o.dtype(), o.shape());
      std::memcpy(first.back().data(), o.data(), o.nbytes());
    }
    xor_with(first, s.ref_key);
    s.ref_sealed = false;
    for (auto& o : s.ref_out) o.poison(0x00);
    call_reference(s);
    call_candidate(s, 0xa5);
    xor_with(first, s.ref_key);
    Unsealed open(s);
    for (size_t i = 0; i < s.task->outputs.size(); ++i) {
      const auto& spec = s.task->outputs[i];
      const Tolerance tol = s.task->tolerance_for(spec);
      compare_output(first[i], s.ref_out[i], tol, spec.name, seed, 1, stats[i]);
      compare_output(s.cand_out[i], s.ref_out[i], tol, spec.name, seed, 2, stats[i]);
      first[i].poison(0x00);
    }
  }
  // Inputs that differ from the last seed's in a few places only: a candidate that caches its answer
  // under a sample of the input values (a hash of some elements) replays a stale answer here.
  if (req.value("perturb", true) && !req.at("seeds").empty()) {
    std::mt19937_64 where(std::random_device{}());
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      HostTensor& t = s.inputs[i];
      const size_t esize = dtype_size(t.dtype()), n = t.nbytes() / (esize ? esize : 1);
      if (n == 0 || !dtype_is_float(t.dtype())) continue;
      HostTensor one(t.dtype(), {1});
      for (int k = 0; k < 4; ++k) {
        const size_t at = k == 0 ? n - 1 : where() % n;
        one.fill(s.task->inputs[i].init, where());
        std::memcpy(static_cast<char*>(t.data()) + at * esize, one.data(), esize);
      }
      std::memcpy(s.snapshot[i].data(), t.data(), t.nbytes());
      if (s.dev) dev_check(s, s.dev->upload(s.d_in[i], t.data(), t.nbytes()), "upload of an input");
    }
    call_candidate(s, 0x5a);
    s.ref_sealed = false;
    for (auto& o : s.ref_out) o.poison(0x00);
    call_reference(s);
    Unsealed open(s);
    for (size_t i = 0; i < s.task->outputs.size(); ++i) {
      const auto& spec = s.task->outputs[i];
      compare_output(s.cand_out[i], s.ref_out[i], s.task->tolerance_for(spec), spec.name, s.last_seed, kPerturbedCall, stats[i]);
    }
  }
  CompareStats all;
  json outputs = json::array();
  for (size_t i = 0; i < stats.size(); ++i) {
    json o = stats[i].to_json();
    o["name"] = s.task->outputs[i].name;
    outputs.push_back(o);
    all.max_abs = std::max(all.max_abs, stats[i].max_abs);
    all.max_rel = std::max(all.max_rel, stats[i].max_rel);
    all.checked += stats[i].checked;
    all.mismatches += stats[i].mismatches;
    all.nonfinite += stats[i].nonfinite;
    if (!all.first && stats[i].first) all.first = stats[i].first;
  }
  json r = all.to_json();
  r["ok"] = true;
  r["correct"] = all.ok();
  r["outputs"] = outputs;
  return r;
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("clflushopt"))) void flush_lines_opt(const char* c, size_t n) {
  for (size_t off = 0; off < n; off += 64) _mm_clflushopt(const_cast<char*>(c + off));
}

void flush_lines(const char* c, size_t n) {
  for (size_t off = 0; off < n; off += 64) _mm_clflush(c + off);
}

bool has_clflushopt() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b >> 23) & 1u;
}
#endif

/// Evicts the operands of the next call from every cache level: the inputs and the outputs it
/// writes. clflushopt where the CPU has it (unordered, so much faster than clflush); elsewhere, a
/// scratch buffer larger than the last-level cache is overwritten instead.
void flush_operands(Setup& s, const std::vector<HostTensor>& outs) {
#if defined(__x86_64__) || defined(__i386__)
  static const bool opt = has_clflushopt();
  auto flush = [&](const HostTensor& t) {
    const auto* p = static_cast<const char*>(t.data());
    if (opt) flush_lines_opt(p, t.nbytes());
    else flush_lines(p, t.nbytes());
  };
  for (const auto& t : s.inputs) flush(t);
  for (const auto& t : outs) flush(t);
  _mm_mfence();
#else
  (void)s;
  (void)outs;
  static std::vector<char> scratch(256u << 20);
  for (size_t i = 0; i < scratch.size(); i += 64) scratch[i] = static_cast<char>(i);
#endif
}

double now_ms() { return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count(); }

struct DeviceTime {
  double event_ms = 0.0;  ///< between events on the runner's stream around the call
  double wall_ms = 0.0;   ///< host clock, from before the call to the end of a context-wide sync
};

/// One timed call on the GPU: the outputs poisoned (the candidate's), L2 overwritten,
/// events on the runner's stream around the call, then the whole context synchronized. The wall
/// clock around call + sync sees work the call left on other streams, which the events do not.
DeviceTime time_on_device(Setup& s, RunFn fn, bool is_candidate, bool flush, void* replay = nullptr) {
  Accelerator& dev = *s.dev;
  if (is_candidate) poison_device(s, 0x5a);
  // The flush is still running when the start timestamp and the call are enqueued: the device goes
  // from the flush to the call with no idle gap, so the host's launch latency is not counted (an idle
  // device would record the start at once and then wait for the launch).
  dev_check(s, dev.synchronize(), "before the call");
  const double t0 = now_ms();
  if (flush) dev_check(s, dev.flush_cache(), "cache flush");
  dev_check(s, dev.mark_start(), "timestamp before the call");
  if (replay != nullptr) dev_check(s, dev.launch_replay(replay), "replay of the recorded call");
  else call(fn, s, is_candidate ? s.d_out_views : s.d_base_views, is_candidate ? "kfab_run" : "GPU baseline");
  dev_check(s, dev.mark_end(), "timestamp after the call");
  dev_check(s, dev.synchronize(), is_candidate ? "after kfab_run" : "after the GPU baseline");
  DeviceTime t;
  t.wall_ms = now_ms() - t0;
  dev_check(s, dev.elapsed_ms(&t.event_ms), "elapsed time");
  return t;
}

/// A call recorded as a CUDA graph, for replay; released with the job.
struct Replay {
  Accelerator* dev = nullptr;
  void* handle = nullptr;
  Replay() = default;
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;
  ~Replay() { reset(); }
  void reset() {
    if (dev) dev->release_replay(handle);
    dev = nullptr;
    handle = nullptr;
  }
};

/// Does `outs` (device) hold the reference's answer? Downloads into scratch host tensors.
bool device_outputs_match(Setup& s, const std::vector<void*>& outs) {
  CompareStats st;
  for (size_t i = 0; i < s.ref_out.size(); ++i) {
    HostTensor got(s.ref_out[i].dtype(), s.ref_out[i].shape());
    dev_check(s, s.dev->download(got.data(), outs[i], got.nbytes()), "download of a replayed output");
    Unsealed open(s);
    compare_output(got, s.ref_out[i], s.task->tolerance_for(s.task->outputs[i]), s.task->outputs[i].name, 0, 4, st);
  }
  return st.ok();
}

/// Records one call of `fn` on the runner's stream as a CUDA graph and checks that a replay into
/// poisoned outputs gives the reference's answer. Empty `why` and a handle on success; otherwise why
/// the call is timed as it is (a call that synchronizes, allocates, or works off the stream cannot be
/// recorded, and that is no fault of the candidate's).
std::string record(Setup& s, RunFn fn, bool is_candidate, Replay& out) {
  Accelerator& dev = *s.dev;
  auto& views = is_candidate ? s.d_out_views : s.d_base_views;
  auto& handles = is_candidate ? s.d_out : s.d_base;
  dev_check(s, dev.synchronize(), "before recording a call");
  int rc = dev.capture_begin();
  if (rc != 0) return "cannot record: " + dev.error(rc);
  std::string why;
  try {
    call(fn, s, views, is_candidate ? "kfab_run" : "GPU baseline");
  } catch (const JobFailure& f) {
    why = "the call failed while recorded: " + f.detail;
  }
  void* handle = nullptr;
  rc = dev.capture_end(&handle);
  if (why.empty() && rc != 0) why = "the call cannot be recorded: " + dev.error(rc);
  if (!why.empty()) {
    dev.release_replay(handle);
    // A failed recording must leave the context usable; a lost context ends this runner.
    dev_check(s, dev.synchronize(), "after a failed recording");
    return why;
  }
  out.dev = &dev;
  out.handle = handle;
  // Work the call started off the recorded stream ran anyway and is not in the graph: it must be done
  // before the outputs are poisoned, or it would fill them in behind the replay and an empty graph
  // would pass for the call (found with tests/fixtures/broken/side_stream.cu).
  dev_check(s, dev.synchronize(), "after recording a call");
  for (size_t i = 0; i < s.ref_out.size(); ++i)
    dev_check(s, dev.fill(handles[i], dtype_is_float(s.ref_out[i].dtype()) ? 0xff : 0x5a, s.ref_out[i].nbytes()),
              "poison of an output");
  dev_check(s, dev.launch_replay(handle), "replay of the recorded call");
  dev_check(s, dev.synchronize(), "after a replay");
  if (!device_outputs_match(s, handles)) return "a replay of the recorded call does not produce the outputs";
  return {};
}

/// SM and memory clock ranges over a timing run, and every reason NVML gave for holding them down.
struct ClockLog {
  bool ok = true;
  unsigned sm_min = ~0u, sm_max = 0, mem_min = ~0u, mem_max = 0;
  unsigned long long reasons = 0;
  int samples = 0;
  void sample() {
    const cuda::Clocks c = cuda::read_clocks();
    if (!c.ok) {
      ok = false;
      return;
    }
    sm_min = std::min(sm_min, c.sm_mhz);
    sm_max = std::max(sm_max, c.sm_mhz);
    mem_min = std::min(mem_min, c.mem_mhz);
    mem_max = std::max(mem_max, c.mem_mhz);
    reasons |= c.reasons & ~0x1ull;  // gpu_idle is expected between calls
    ++samples;
  }
  json to_json() const {
    if (!ok || samples == 0) return {{"recorded", false}, {"why", "NVML (libnvidia-ml.so.1) is not available"}};
    const bool drift = sm_max > 0 && static_cast<double>(sm_max - sm_min) / sm_max > 0.05;
    return {{"recorded", true}, {"sm_mhz_min", sm_min}, {"sm_mhz_max", sm_max}, {"mem_mhz_min", mem_min},
            {"mem_mhz_max", mem_max}, {"reasons", cuda::clock_reasons(reasons)}, {"samples", samples},
            {"drift", drift}};
  }
};

json time_job(const json& req) {
  Setup s;
  if (auto f = prepare(req, s)) return *f;
  const auto base_seed = req.at("base_seed").get<uint64_t>();
  const auto min_calls = req.value("min_calls", 50);
  const auto max_calls = req.value("max_calls", 10000);
  const double min_time_ms = req.value("min_time_s", 0.5) * 1e3;
  const double max_time_ms = req.value("max_time_s", 30.0) * 1e3;
  const int warmup = req.value("warmup", 3);
  const bool flush = req.value("flush", true);
  fill_inputs(s, base_seed, req.value("seed", 0));

  // Warm-up. On a device the CPU reference runs once (its answer checks the timed calls) unless it
  // is itself the baseline being timed: at GPU sizes it is far slower than everything else here.
  call_reference(s);
  const double warm_start = now_ms();
  for (int i = 0; i < warmup || now_ms() - warm_start < 20.0; ++i) {
    if (!s.dev) {
      call_candidate(s, 0x5a);
      call_reference(s);
    } else {
      call(s.candidate, s, s.d_out_views, "kfab_run");
      if (s.gpu_baseline) call(s.gpu_baseline, s, s.d_base_views, "GPU baseline");
      else if (i < 2) call_reference(s);
      dev_check(s, s.dev->synchronize(), "after a warm-up call");
    }
    if (i > 1000) break;
  }
  ClockLog clocks;
  std::vector<double> cand_wall;
  // What timestamps and a device-wide sync cost with no work in between: the part of a call's wall
  // time that is not the candidate's.
  std::vector<double> empty_wall;
  for (int i = 0; s.dev && i < 20; ++i) {
    dev_check(s, s.dev->synchronize(), "sync");
    const double t0 = now_ms();
    if (flush) dev_check(s, s.dev->flush_cache(), "cache flush");
    dev_check(s, s.dev->mark_start(), "timestamp");
    dev_check(s, s.dev->mark_end(), "timestamp");
    dev_check(s, s.dev->synchronize(), "sync");
    empty_wall.push_back(now_ms() - t0);
  }
  // Outputs are poisoned before every timed call (outside the timed span), and a random sample of
  // calls plus the last one are checked against the reference: a candidate that skips work once it
  // is being timed leaves poison behind.
  std::mt19937_64 pick(std::random_device{}());
  auto check = [&](int iteration) -> std::optional<json> {
    if (s.dev)
      for (size_t i = 0; i < s.cand_out.size(); ++i)
        dev_check(s, s.dev->download(s.cand_out[i].data(), s.d_out[i], s.cand_out[i].nbytes()), "download of an output");
    CompareStats st;
    Unsealed open(s);
    for (size_t i = 0; i < s.task->outputs.size(); ++i)
      compare_output(s.cand_out[i], s.ref_out[i], s.task->tolerance_for(s.task->outputs[i]),
                     s.task->outputs[i].name, req.value("seed", 0), 3, st);
    if (st.ok()) return std::nullopt;
    json r = failure("incorrect", "the output of timed call " + std::to_string(iteration + 1) +
                                      " does not match the reference: work was skipped while timed");
    r["evidence"] = st.to_json();
    return r;
  };
  // Short calls (under 100 us on the device) are recorded as CUDA graphs and replayed: the time is
  // then the kernels', not the host's launch latency between them. The candidate and the GPU baseline
  // are timed the same way: both are replayed or neither is.
  Replay cand_replay, base_replay;
  json replay_note = {{"used", false}};
  if (s.cuda && req.value("replay", true)) {
    std::vector<double> probe;
    for (int i = 0; i < 5; ++i) probe.push_back(time_on_device(s, s.candidate, true, flush).event_ms);
    const double probe_ms = summarize(probe).median;
    replay_note["probe_median_ms"] = probe_ms;
    if (probe_ms >= 0.1) {
      replay_note["why"] = "the call takes 100 us or more: launched directly";
    } else {
      std::string why = record(s, s.candidate, true, cand_replay);
      if (why.empty() && s.gpu_baseline) {
        why = record(s, s.gpu_baseline, false, base_replay);
        if (!why.empty()) why = "GPU baseline: " + why;
      }
      if (why.empty()) {
        replay_note = {{"used", true}, {"probe_median_ms", probe_ms}, {"why", "calls under 100 us are replayed as CUDA graphs"}};
      } else {
        replay_note["why"] = why + "; launched directly";
        cand_replay.reset();
        base_replay.reset();
      }
    }
  }
  std::vector<double> cand, ref;
  const double start = now_ms();
  for (;;) {
    const int n = static_cast<int>(cand.size());
    const double elapsed = now_ms() - start;
    if (n >= max_calls) break;
    if (n >= min_calls && elapsed >= min_time_ms) break;
    if (n >= 1 && elapsed >= max_time_ms) break;
    // Alternate which goes first, so neither always runs right after the other's flush.
    for (int k = 0; k < 2; ++k) {
      const bool is_cand = (k == 0) == (n % 2 == 0);
      if (is_cand && !s.dev)
        for (auto& o : s.cand_out) o.poison(0x5a);
      if (s.dev && (is_cand || s.gpu_baseline)) {
        const DeviceTime t = time_on_device(s, is_cand ? s.candidate : s.gpu_baseline, is_cand, flush,
                                            is_cand ? cand_replay.handle : base_replay.handle);
        (is_cand ? cand : ref).push_back(t.event_ms);
        if (is_cand) cand_wall.push_back(t.wall_ms);
        continue;
      }
      if (flush) flush_operands(s, is_cand ? s.cand_out : s.ref_out);
      const double t0 = now_ms();
      if (is_cand) call(s.candidate, s, s.cand_views, "kfab_run");
      else raw_reference(s);
      (is_cand ? cand : ref).push_back(now_ms() - t0);
      if (!is_cand) seal(s);
    }
    if (pick() % 8 == 0)
      if (auto bad = check(n)) return *bad;
    if (s.cuda && n % 10 == 0) clocks.sample();
  }
  if (s.dev)
    for (size_t i = 0; i < s.inputs.size(); ++i)
      dev_check(s, s.dev->download(s.inputs[i].data(), s.d_in[i], s.inputs[i].nbytes()), "download of an input");
  if (auto c = input_change(s); !c.empty()) throw JobFailure{"rejected", c + " during timing"};
  if (auto bad = check(static_cast<int>(cand.size()) - 1)) return *bad;
  json reply = {{"ok", true}, {"candidate", summarize(cand).to_json()}, {"baseline", summarize(ref).to_json()}};
  if (s.dev) {
    if (s.cuda) clocks.sample();
    reply["candidate_wall"] = summarize(cand_wall).to_json();
    reply["empty_call_wall"] = summarize(empty_wall).to_json();
    if (s.cuda) reply["clocks"] = clocks.to_json();
    reply["baseline_kind"] = s.gpu_baseline ? "gpu" : "cpu";
    if (s.cuda) reply["replay"] = replay_note;
    if (s.gpu_baseline) {
      // The GPU baseline must be right too, or its time means nothing.
      std::vector<HostTensor> got;
      CompareStats st;
      Unsealed open(s);
      for (size_t i = 0; i < s.ref_out.size(); ++i) {
        got.emplace_back(s.ref_out[i].dtype(), s.ref_out[i].shape());
        dev_check(s, s.dev->download(got[i].data(), s.d_base[i], got[i].nbytes()), "download of the baseline");
        compare_output(got[i], s.ref_out[i], s.task->tolerance_for(s.task->outputs[i]), s.task->outputs[i].name, 0, 1, st);
      }
      if (!st.ok()) return failure("reference_failed", "the task's GPU baseline (reference.cu) disagrees with its CPU reference: " + st.to_json().dump());
    }
  }
  return reply;
}

/// Copy bandwidth of this machine (bytes read + written per second), the best of several passes with
/// one thread and with all: on a busy machine one thread on a free core can beat all of them.
/// Runs the candidate `calls` times on one seed's inputs and nothing else: for a profiler.
json run_job(const json& req) {
  Setup s;
  if (auto f = prepare(req, s)) return *f;
  fill_inputs(s, req.at("base_seed").get<uint64_t>(), req.value("seed", 0));
  const int calls = req.value("calls", 5);
  for (int i = 0; i < calls; ++i) call_candidate(s, 0x5a);
  return {{"ok", true}, {"calls", calls}};
}

json machine_job(const json& req) {
  if (const std::string target = req.value("target", "cpu"); target != "cpu") {
    Accelerator* dev = accelerator(target);
    if (dev == nullptr) return failure("protocol_error", "unknown target " + target);
    if (auto e = dev->open(); !e.empty()) return failure("device_error", e);
    json j = dev->describe();
    j["ok"] = true;
    j["copy_bandwidth_bytes_per_s"] = dev->copy_bandwidth();
    return j;
  }
  const size_t bytes = req.value("bytes", size_t{256} << 20);
  const size_t n = bytes / sizeof(double);
  std::unique_ptr<double[]> a(new double[n]), b(new double[n]);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<double>(i);
    b[i] = 0.0;
  }
  double best = 0.0;
  const int all = omp_get_max_threads();
  for (int threads : {1, all}) {
    for (int pass = 0; pass < 6; ++pass) {
      const double t0 = now_ms();
#pragma omp parallel for schedule(static) num_threads(threads)
      for (size_t i = 0; i < n; ++i) b[i] = a[i];
      const double ms = now_ms() - t0;
      best = std::max(best, 2.0 * static_cast<double>(bytes) / (ms * 1e-3));
      std::swap(a, b);
    }
  }
  return {{"ok", true}, {"copy_bandwidth_bytes_per_s", best}, {"threads", all}};
}

}  // namespace

json handle(const json& req) {
  const std::string op = req.value("op", "");
  try {
    if (op == "hello") return {{"ok", true}, {"protocol", 1}};
    if (op == "verify") return verify(req);
    if (op == "time") return time_job(req);
    if (op == "machine") return machine_job(req);
    if (op == "run") return run_job(req);
    return failure("protocol_error", "unknown op \"" + op + "\"");
  } catch (const JobFailure& f) {
    return failure(f.kind, f.detail, f.fatal);
  } catch (const json::exception& e) {
    return failure("protocol_error", std::string("malformed request: ") + e.what());
  } catch (const std::bad_alloc&) {
    return failure("crashed", "out of memory while preparing the job (the runner's address-space limit)");
  }
}

}  // namespace kfab::runner
