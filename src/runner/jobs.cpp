#include "runner/jobs.h"

#include <dlfcn.h>
#include <omp.h>
#include <linux/perf_event.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
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
#include "core/compare.h"
#include "core/stats.h"
#include "runner/accelerator.h"
#include "runner/shared_region.h"

namespace kfab::runner {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using RunFn = int (*)(const kfab_tensor*, int32_t, kfab_tensor*, int32_t, void*);

namespace {

bool g_trusted = false;

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

// Libraries stay loaded for the runner's life: a runner serves one candidate, or the reference.
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

/// A call recorded as a CUDA graph, for replay; released with its setup.
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

/// SM and memory clock ranges over a timing run, and every reason NVML gave for holding them down.
struct ClockLog {
  bool ok = true;
  unsigned sm_min = ~0u, sm_max = 0, mem_min = ~0u, mem_max = 0;
  unsigned long long reasons = 0;
  int samples = 0;
  void sample(Accelerator& dev) {
    const ClockReading c = dev.read_clocks();
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
  json to_json(const Accelerator& dev) const {
    if (!ok || samples == 0) return {{"recorded", false}, {"why", dev.no_clocks_why()}};
    const bool drift = sm_max > 0 && static_cast<double>(sm_max - sm_min) / sm_max > 0.05;
    return {{"recorded", true}, {"sm_mhz_min", sm_min}, {"sm_mhz_max", sm_max}, {"mem_mhz_min", mem_min},
            {"mem_mhz_max", mem_max}, {"reasons", dev.clock_reasons(reasons)}, {"samples", samples},
            {"drift", drift}};
  }
};

/// Bytes of an input as they were before a perturbation changed them.
struct Undo {
  size_t input = 0;
  size_t offset = 0;
  std::vector<unsigned char> bytes;
};

/// What the jobs of one task, function and shape share; kept between jobs (one at a time), so that
/// a seed's inputs are made once and the candidate's outputs stay in the shared memory kfab maps.
/// `fn` is the candidate in a candidate's runner and the C++ reference in the trusted one, where
/// `gpu_baseline` (the task's reference.cu) is what a device target times.
struct Setup {
  std::string key;
  const Task* task = nullptr;
  RunFn fn = nullptr;
  RunFn gpu_baseline = nullptr;
  bool candidate = true;
  ShapeBinding shape;
  std::vector<HostTensor> inputs;
  std::vector<HostTensor> snapshot;  ///< what the inputs must hold: made from the seed, then perturbed
  std::vector<kfab_tensor> in_views;
  /// fn's outputs on the host. A candidate's live in `region`, shared memory that kfab compares while
  /// the runner is frozen; the trusted runner's are its own (the answers it passes go in fresh regions).
  SharedRegion region;
  std::vector<HostTensor> outs;
  std::vector<kfab_tensor> out_views;
  // Device targets: the candidate (or the GPU baseline) works on device copies of the inputs.
  Accelerator* dev = nullptr;
  std::vector<void*> d_in, d_out;
  std::vector<kfab_tensor> d_in_views, d_out_views;
  bool have_seed = false;
  uint64_t base_seed = 0;
  int64_t seed = 0;
  std::vector<Undo> undo;
  Replay replay;
  ClockLog clocks;

  Setup() = default;
  Setup(const Setup&) = delete;
  Setup& operator=(const Setup&) = delete;
  ~Setup() {
    replay.reset();
    if (dev == nullptr) return;
    for (auto* list : {&d_in, &d_out})
      for (void* p : *list) dev->release(p);
  }
  /// The function timed as this runner's side: the candidate, or the baseline (GPU or C++ reference).
  RunFn timed_fn() const { return gpu_baseline ? gpu_baseline : fn; }
  /// Whether the timed function works on the device.
  bool timed_on_device() const { return dev != nullptr; }
};

std::unique_ptr<Setup> g_setup;

/// A device call's result: a failure that names the error. Errors the device cannot recover from
/// (a CUDA kernel fault loses the context) end this runner; kfab starts another.
void dev_check(Setup& s, int rc, const std::string& what) {
  if (rc != 0) throw JobFailure{"crashed", what + ": " + s.dev->error(rc), s.dev->fatal(rc)};
}

/// Tensors over a region, one per output of the task, at region_layout's offsets.
std::vector<HostTensor> outputs_in(SharedRegion& r, const Task& task, const ShapeBinding& shape) {
  size_t total = 0;
  const auto at = region_layout(output_bytes(task, shape), &total);
  std::vector<HostTensor> v;
  for (size_t i = 0; i < task.outputs.size(); ++i)
    v.push_back(HostTensor::borrow(task.outputs[i].dtype, task.dims(task.outputs[i], shape),
                                   static_cast<char*>(r.data()) + at[i]));
  return v;
}

/// The reply's account of a region passed to kfab: one descriptor, the outputs' offsets in it.
json region_reply(const Task& task, const ShapeBinding& shape) {
  size_t total = 0;
  const auto at = region_layout(output_bytes(task, shape), &total);
  return {{"ok", true}, {"fds", 1}, {"offsets", at}, {"bytes", total}};
}

void pass_region(const SharedRegion& r) {
  if (!send_fds(kRunnerChannelFd, {r.fd()})) throw JobFailure{"protocol_error", "cannot pass shared memory to kfab"};
}

std::optional<json> prepare(const json& req, Setup*& out) {
  const bool candidate = !g_trusted;
  const std::string task_path = req.at("task").get<std::string>();
  const std::string fn_path = req.at(candidate ? "candidate" : "reference").get<std::string>();
  const std::string target = req.value("target", "cpu");
  const std::string baseline = candidate ? std::string() : req.value("gpu_baseline", "");
  const std::string key = task_path + '\n' + fn_path + '\n' + baseline + '\n' + target + '\n' + req.at("shape").dump();
  if (g_setup && g_setup->key == key) {
    out = g_setup.get();
    return std::nullopt;
  }
  g_setup.reset();
  auto it = g_tasks.find(task_path);
  if (it == g_tasks.end()) {
    auto t = load_task(task_path);
    if (!t) return failure("task_error", t.error().to_string());
    it = g_tasks.emplace(task_path, std::move(*t)).first;
  }
  auto s = std::make_unique<Setup>();
  s->task = &it->second;
  s->candidate = candidate;
  if (auto e = load(fn_path, &s->fn); !e.empty())
    return candidate ? failure("load_failed", e) : failure("reference_failed", "reference: " + e);
  if (!baseline.empty())
    if (auto e = load(baseline, &s->gpu_baseline); !e.empty()) return failure("reference_failed", "GPU baseline: " + e);
  for (const auto& [k, v] : req.at("shape").items()) s->shape[k] = v.get<int64_t>();
  for (const auto& in : s->task->inputs) {
    s->inputs.emplace_back(in.dtype, s->task->dims(in, s->shape));
    s->snapshot.emplace_back(in.dtype, s->task->dims(in, s->shape));
  }
  for (auto& t : s->inputs) s->in_views.push_back(t.view());
  if (candidate) {
    size_t total = 0;
    region_layout(output_bytes(*s->task, s->shape), &total);
    auto r = SharedRegion::create(total, "kfab-outputs");
    if (!r) return failure("crashed", "the runner cannot hold the outputs: " + r.error().message);
    s->region = std::move(*r);
    s->outs = outputs_in(s->region, *s->task, s->shape);
  } else {
    for (const auto& o : s->task->outputs) s->outs.emplace_back(o.dtype, s->task->dims(o, s->shape));
  }
  for (auto& t : s->outs) s->out_views.push_back(t.view());
  const DeviceFor device = accelerator(target);
  if (!device.known) return failure("protocol_error", "unknown target " + target);
  if (device.device != nullptr && (candidate || s->gpu_baseline)) {
    s->dev = device.device;
    if (auto e = s->dev->open(); !e.empty()) return failure("device_error", e);
    auto mirror = [&](const std::vector<kfab_tensor>& views, const std::vector<HostTensor>& host,
                      std::vector<void*>& handles, std::vector<kfab_tensor>& dviews) {
      for (size_t i = 0; i < host.size(); ++i) {
        void* p = nullptr;
        dev_check(*s, s->dev->alloc(&p, host[i].nbytes()), "device allocation");
        handles.push_back(p);
        kfab_tensor v = views[i];
        v.data = p;
        dviews.push_back(v);
      }
    };
    mirror(s->in_views, s->inputs, s->d_in, s->d_in_views);
    mirror(s->out_views, s->outs, s->d_out, s->d_out_views);
  }
  s->key = key;
  g_setup = std::move(s);
  out = g_setup.get();
  return std::nullopt;
}

/// Makes the inputs those of (base_seed, seed), changed in four places per float input when
/// `perturb` is not 0: a fresh input set for every call kfab times, which an answer stored under
/// earlier inputs, or under a sample of their values, does not fit. With `last`, the last element is
/// one of the four (verification's check of caches keyed on a sample); timed calls change four
/// places no sample can foresee. Only what changed is written again, on the host and on the device.
void set_inputs(Setup& s, uint64_t base_seed, int64_t seed, uint64_t perturb, bool last = true) {
  if (!s.have_seed || s.base_seed != base_seed || s.seed != seed) {
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      s.inputs[i].fill(s.task->inputs[i].init, derive_seed(base_seed, static_cast<uint64_t>(seed), i));
      std::memcpy(s.snapshot[i].data(), s.inputs[i].data(), s.inputs[i].nbytes());
      if (s.dev) dev_check(s, s.dev->upload(s.d_in[i], s.inputs[i].data(), s.inputs[i].nbytes()), "upload of an input");
    }
    s.undo.clear();
    s.have_seed = true;
    s.base_seed = base_seed;
    s.seed = seed;
  }
  auto write = [&](size_t i, size_t off, const void* bytes, size_t n) {
    std::memcpy(static_cast<char*>(s.inputs[i].data()) + off, bytes, n);
    std::memcpy(static_cast<char*>(s.snapshot[i].data()) + off, bytes, n);
    if (s.dev) dev_check(s, s.dev->upload(s.d_in[i], bytes, n, off), "upload of an input");
  };
  for (auto u = s.undo.rbegin(); u != s.undo.rend(); ++u) write(u->input, u->offset, u->bytes.data(), u->bytes.size());
  s.undo.clear();
  if (perturb == 0) return;
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    HostTensor& t = s.inputs[i];
    const size_t esize = dtype_size(t.dtype()), n = t.numel();
    if (n == 0 || !dtype_is_float(t.dtype())) continue;
    uint64_t state = derive_seed(perturb, i, 0x70657274);
    HostTensor one(t.dtype(), {1});
    for (int k = 0; k < 4; ++k) {
      const size_t at = k == 0 && last ? n - 1 : splitmix64(state) % n;
      const size_t off = at * esize;
      Undo u{i, off, std::vector<unsigned char>(esize)};
      std::memcpy(u.bytes.data(), static_cast<const char*>(s.snapshot[i].data()) + off, esize);
      s.undo.push_back(std::move(u));
      one.fill(s.task->inputs[i].init, splitmix64(state));
      write(i, off, one.data(), esize);
    }
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

void call(RunFn fn, Setup& s, bool on_device, const char* who) {
  int rc;
  try {
    auto& ins = on_device ? s.d_in_views : s.in_views;
    auto& outs = on_device ? s.d_out_views : s.out_views;
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

/// Poisons fn's outputs on the device, where they are: NaN (every byte 0xff) for floats, the byte
/// `pattern` for integers. A memset on the stream, no host copy.
void poison_device(Setup& s, unsigned char pattern) {
  for (size_t i = 0; i < s.outs.size(); ++i)
    dev_check(s, s.dev->fill(s.d_out[i], dtype_is_float(s.outs[i].dtype()) ? 0xff : pattern, s.outs[i].nbytes()),
              "poison of an output");
}

void download_outputs(Setup& s) {
  for (size_t i = 0; i < s.outs.size(); ++i)
    dev_check(s, s.dev->download(s.outs[i].data(), s.d_out[i], s.outs[i].nbytes()), "download of an output");
}

/// One checked call of the candidate: its outputs poisoned with `pattern` first, its inputs
/// unchanged after. On a device the outputs come back to the host (the shared region) after a
/// device-wide synchronization, and the inputs with them to be checked.
void call_candidate(Setup& s, unsigned char pattern) {
  if (!s.dev) {
    for (auto& o : s.outs) o.poison(pattern);
    call(s.fn, s, false, "kfab_run");
    if (auto c = input_change(s); !c.empty()) throw JobFailure{"rejected", c};
    return;
  }
  poison_device(s, pattern);
  call(s.fn, s, true, "kfab_run");
  dev_check(s, s.dev->synchronize(), "after kfab_run");
  download_outputs(s);
  for (size_t i = 0; i < s.inputs.size(); ++i)
    dev_check(s, s.dev->download(s.inputs[i].data(), s.d_in[i], s.inputs[i].nbytes()), "download of an input");
  if (auto c = input_change(s); !c.empty()) throw JobFailure{"rejected", c};
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
void flush_operands(const Setup& s, const std::vector<HostTensor>& outs) {
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

/// This process's CPU time over all its threads, and how often it was descheduled against its will:
/// what a timed call on the CPU is judged by beside its wall time (a call that waited for its threads,
/// or for a machine busy with other work, is on a CPU for less of its wall time).
struct CpuUse {
  double cpu_ms = 0.0;
  long involuntary = 0;
  static CpuUse now() {
    CpuUse u;
    timespec ts{};
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0) u.cpu_ms = static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
    rusage r{};
    if (getrusage(RUSAGE_SELF, &r) == 0) u.involuntary = r.ru_nivcsw;
    return u;
  }
};

struct DeviceTime {
  double event_ms = 0.0;  ///< between events on the runner's stream around the call
  double wall_ms = 0.0;   ///< host clock, from before the call to the end of a context-wide sync
};

/// One timed call on the device: the outputs poisoned, L2 overwritten, events on the runner's stream
/// around the call, then the whole context synchronized. The wall clock around call + sync sees work
/// the call left on other streams, which the events do not.
DeviceTime time_on_device(Setup& s, RunFn fn, bool flush, void* replay) {
  Accelerator& dev = *s.dev;
  poison_device(s, 0x5a);
  // The flush is still running when the start timestamp and the call are enqueued: the device goes
  // from the flush to the call with no idle gap, so the host's launch latency is not counted.
  dev_check(s, dev.synchronize(), "before the call");
  const double t0 = now_ms();
  if (flush) dev_check(s, dev.flush_cache(), "cache flush");
  dev_check(s, dev.mark_start(), "timestamp before the call");
  const char* who = s.candidate ? "kfab_run" : "GPU baseline";
  if (replay != nullptr) dev_check(s, dev.launch_replay(replay), "replay of the recorded call");
  else call(fn, s, true, who);
  dev_check(s, dev.mark_end(), "timestamp after the call");
  dev_check(s, dev.synchronize(), s.candidate ? "after kfab_run" : "after the GPU baseline");
  DeviceTime t;
  t.wall_ms = now_ms() - t0;
  dev_check(s, dev.elapsed_ms(&t.event_ms), "elapsed time");
  return t;
}

/// Records one call of the timed function on the runner's stream as a CUDA graph and checks that a
/// replay into poisoned outputs gives what a direct call gave. Empty on success; otherwise why the
/// call is launched directly (a call that synchronizes, allocates, or works off the stream cannot be
/// recorded, and that is no fault of the candidate's). kfab checks the outputs of timed calls against
/// the reference itself.
std::string record(Setup& s) {
  Accelerator& dev = *s.dev;
  const RunFn fn = s.timed_fn();
  const char* who = s.candidate ? "kfab_run" : "GPU baseline";
  poison_device(s, 0x5a);
  call(fn, s, true, who);
  dev_check(s, dev.synchronize(), "before recording a call");
  std::vector<HostTensor> direct;
  for (size_t i = 0; i < s.outs.size(); ++i) {
    direct.emplace_back(s.outs[i].dtype(), s.outs[i].shape());
    dev_check(s, dev.download(direct.back().data(), s.d_out[i], direct.back().nbytes()), "download of an output");
  }
  int rc = dev.capture_begin();
  if (rc != 0) return "cannot record: " + dev.error(rc);
  std::string why;
  try {
    call(fn, s, true, who);
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
  s.replay.dev = &dev;
  s.replay.handle = handle;
  // Work the call started off the recorded stream ran anyway and is not in the graph: it must be done
  // before the outputs are poisoned, or it would fill them in behind the replay and an empty graph
  // would pass for the call (found with tests/fixtures/broken/side_stream.cu).
  dev_check(s, dev.synchronize(), "after recording a call");
  poison_device(s, 0x5a);
  dev_check(s, dev.launch_replay(handle), "replay of the recorded call");
  dev_check(s, dev.synchronize(), "after a replay");
  CompareStats st;
  for (size_t i = 0; i < s.outs.size(); ++i) {
    HostTensor got(s.outs[i].dtype(), s.outs[i].shape());
    dev_check(s, dev.download(got.data(), s.d_out[i], got.nbytes()), "download of a replayed output");
    compare_output(got, direct[i], s.task->tolerance_for(s.task->outputs[i]), s.task->outputs[i].name, 0, 4, st);
  }
  if (!st.ok()) {
    s.replay.reset();
    return "a replay of the recorded call does not produce what the call did";
  }
  return {};
}

json reference_job(const json& req) {
  Setup* sp = nullptr;
  if (auto f = prepare(req, sp)) return *f;
  Setup& s = *sp;
  set_inputs(s, req.at("base_seed").get<uint64_t>(), req.at("seed").get<int64_t>(), req.value("perturb", uint64_t{0}),
             req.value("perturb_last", true));
  size_t total = 0;
  region_layout(output_bytes(*s.task, s.shape), &total);
  auto r = SharedRegion::create(total, "kfab-reference");
  if (!r) return failure("task_error", "the reference's outputs do not fit in memory: " + r.error().message);
  auto outs = outputs_in(*r, *s.task, s.shape);
  std::vector<kfab_tensor> views;
  for (auto& t : outs) {
    t.poison(0x00);
    views.push_back(t.view());
  }
  try {
    const int rc = s.fn(s.in_views.data(), static_cast<int32_t>(s.in_views.size()), views.data(),
                        static_cast<int32_t>(views.size()), nullptr);
    if (rc != 0) return failure("reference_failed", "the reference returned " + std::to_string(rc));
  } catch (const std::exception& e) {
    return failure("reference_failed", std::string("the reference threw an exception: ") + e.what());
  }
  if (auto c = input_change(s); !c.empty()) return failure("reference_failed", "the reference modified an input: " + c);
  pass_region(*r);
  return region_reply(*s.task, s.shape);  // the region is unmapped and closed here: only kfab holds it
}

json call_job(const json& req) {
  Setup* sp = nullptr;
  if (auto f = prepare(req, sp)) return *f;
  Setup& s = *sp;
  set_inputs(s, req.at("base_seed").get<uint64_t>(), req.at("seed").get<int64_t>(), req.value("perturb", uint64_t{0}),
             req.value("perturb_last", true));
  call_candidate(s, static_cast<unsigned char>(req.value("pattern", 0x5a)));
  pass_region(s.region);
  return region_reply(*s.task, s.shape);
}

/// Runs the candidate `calls` times on one seed's inputs and nothing else: for a profiler.
json run_job(const json& req) {
  Setup* sp = nullptr;
  if (auto f = prepare(req, sp)) return *f;
  Setup& s = *sp;
  set_inputs(s, req.at("base_seed").get<uint64_t>(), req.value("seed", 0), 0);
  const int calls = req.value("calls", 5);
  for (int i = 0; i < calls; ++i) call_candidate(s, 0x5a);
  return {{"ok", true}, {"calls", calls}};
}

/// One untimed call of this side's timed function (warm-up).
void warm_call(Setup& s) {
  if (s.timed_on_device()) {
    call(s.timed_fn(), s, true, s.candidate ? "kfab_run" : "GPU baseline");
    dev_check(s, s.dev->synchronize(), "after a warm-up call");
  } else if (s.candidate) {
    call_candidate(s, 0x5a);
  } else {
    call(s.fn, s, false, "reference");
  }
}

/// Before timed calls: the timing inputs, warm-up, what an empty timed call costs on a device, and
/// (CUDA, short calls) the call recorded as a graph for replay.
json time_prepare_job(const json& req) {
  Setup* sp = nullptr;
  if (auto f = prepare(req, sp)) return *f;
  Setup& s = *sp;
  s.replay.reset();
  s.clocks = ClockLog();
  set_inputs(s, req.at("base_seed").get<uint64_t>(), req.at("seed").get<int64_t>(), 0);
  const int warmup = req.value("warmup", 3);
  const bool flush = req.value("flush", true);
  const double warm_start = now_ms();
  for (int i = 0; i < warmup || now_ms() - warm_start < 20.0; ++i) {
    try {
      warm_call(s);
    } catch (JobFailure& f) {
      if (!s.candidate) f.kind = "reference_failed";
      throw;
    }
    if (i > 1000) break;
  }
  json reply = {{"ok", true}};
  if (s.timed_on_device()) {
    // What timestamps and a device-wide sync cost with no work in between: the part of a call's wall
    // time that is not the candidate's.
    std::vector<double> empty_wall;
    for (int i = 0; i < 20; ++i) {
      dev_check(s, s.dev->synchronize(), "sync");
      const double t0 = now_ms();
      if (flush) dev_check(s, s.dev->flush_cache(), "cache flush");
      dev_check(s, s.dev->mark_start(), "timestamp");
      dev_check(s, s.dev->mark_end(), "timestamp");
      dev_check(s, s.dev->synchronize(), "sync");
      empty_wall.push_back(now_ms() - t0);
    }
    reply["empty_call_wall"] = summarize(empty_wall).to_json();
  }
  // Short calls (under 100 us on the device) are recorded as CUDA graphs and replayed: the time is
  // then the kernels', not the host's launch latency between them. kfab asks the trusted runner to
  // replay the GPU baseline exactly when the candidate's calls are replayed.
  json note = {{"used", false}};
  const bool replays = s.dev && s.dev->replays();
  if (replays && s.timed_on_device() && req.value("replay", true)) {
    bool want = req.value("force_replay", false);
    if (!want) {
      std::vector<double> probe;
      for (int i = 0; i < 5; ++i) probe.push_back(time_on_device(s, s.timed_fn(), flush, nullptr).event_ms);
      const double probe_ms = summarize(probe).median;
      note["probe_median_ms"] = probe_ms;
      want = probe_ms < 0.1;
      if (!want) note["why"] = "the call takes 100 us or more: launched directly";
    }
    if (want) {
      if (const std::string why = record(s); why.empty()) {
        note["used"] = true;
        note["why"] = "calls under 100 us are replayed as CUDA graphs";
      } else {
        note["why"] = why + "; launched directly";
      }
    }
  }
  if (replays) reply["replay"] = note;
  return reply;
}

/// Counters of the calling process for `kfab eval --profile` on the CPU (perf_event_open, user space
/// only, as kernel.perf_event_paranoid 2 allows): the hardware ones where the machine has a PMU, the
/// kernel's software ones always. Opened once, read around each timed call outside its timed span.
class PerfCounters {
 public:
  static PerfCounters& get() {
    static PerfCounters p;
    return p;
  }
  /// name -> count since the counters were opened
  json read() const {
    json out = json::object();
    for (size_t i = 0; i < fds_.size(); ++i) {
      uint64_t v = 0;
      if (::read(fds_[i], &v, sizeof v) == static_cast<ssize_t>(sizeof v)) out[names_[i]] = v;
    }
    return out;
  }
  const std::string& why_no_hardware() const { return why_; }

 private:
  PerfCounters() {
    const std::pair<const char*, std::pair<uint32_t, uint64_t>> events[] = {
        {"cycles", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES}},
        {"instructions", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS}},
        {"cache_references", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES}},
        {"cache_misses", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES}},
        {"branch_misses", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES}},
        {"task_clock_ns", {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK}},
        {"context_switches", {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES}},
        {"page_faults", {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS}},
    };
    for (const auto& [name, ev] : events) {
      perf_event_attr a{};
      a.size = sizeof a;
      a.type = ev.first;
      a.config = ev.second;
      a.exclude_kernel = 1;
      a.exclude_hv = 1;
      a.inherit = 1;  // threads the candidate starts from here on (OpenMP's pool, once made)
      const long fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
      if (fd < 0) {
        if (why_.empty()) {
          std::string paranoid = "?";
          if (FILE* f = std::fopen("/proc/sys/kernel/perf_event_paranoid", "r")) {
            char buf[16] = {};
            if (std::fgets(buf, sizeof buf, f) != nullptr) paranoid = std::string(buf).substr(0, std::strcspn(buf, "\n"));
            std::fclose(f);
          }
          why_ = std::string("perf_event_open(") + name + ") failed: " + std::strerror(errno) +
                 (errno == ENOENT || errno == EOPNOTSUPP ? " (no hardware PMU here, as in a VM without a virtual one)"
                                                         : " (kernel.perf_event_paranoid is " + paranoid +
                                                               ", or a container's seccomp profile forbids the call)");
        }
        continue;
      }
      fds_.push_back(static_cast<int>(fd));
      names_.emplace_back(name);
    }
  }
  std::vector<int> fds_;
  std::vector<std::string> names_;
  std::string why_;
};

/// One timed call. A candidate's runs on the timing inputs changed anew (`perturb`); on the CPU its
/// outputs are in the region passed with the reply, on a device they stay there until kfab fetches
/// them (a check kfab decides on after the call).
json time_call_job(const json& req) {
  if (!g_setup) return failure("protocol_error", "time_call before time_prepare");
  Setup& s = *g_setup;
  const bool flush = req.value("flush", true);
  json reply = {{"ok", true}};
  if (s.candidate) set_inputs(s, s.base_seed, s.seed, req.value("perturb", uint64_t{0}), false);
  if (s.timed_on_device()) {
    const DeviceTime t = time_on_device(s, s.timed_fn(), flush, s.replay.handle);
    reply["ms"] = t.event_ms;
    reply["wall_ms"] = t.wall_ms;
    if (s.dev && s.dev->reads_clocks() && req.value("clocks", false)) s.clocks.sample(*s.dev);
    return reply;
  }
  if (s.candidate)
    for (auto& o : s.outs) o.poison(0x5a);
  if (flush) flush_operands(s, s.outs);
  const bool counting = req.value("counters", false);
  const json c0 = counting ? PerfCounters::get().read() : json();
  const CpuUse u0 = CpuUse::now();
  const double t0 = now_ms();
  try {
    call(s.fn, s, false, s.candidate ? "kfab_run" : "reference");
  } catch (JobFailure& f) {
    if (!s.candidate) f.kind = "reference_failed";
    throw;
  }
  reply["ms"] = now_ms() - t0;
  const CpuUse u1 = CpuUse::now();
  reply["cpu_ms"] = u1.cpu_ms - u0.cpu_ms;
  reply["preempted"] = u1.involuntary > u0.involuntary;
  if (counting) {
    json c = PerfCounters::get().read();
    for (auto& [k, v] : c.items())
      if (c0.contains(k)) v = v.get<uint64_t>() - c0[k].get<uint64_t>();
    reply["counters"] = c;
    if (!PerfCounters::get().why_no_hardware().empty()) reply["counters_missing"] = PerfCounters::get().why_no_hardware();
  }
  if (s.candidate) {
    pass_region(s.region);
    reply.update(region_reply(*s.task, s.shape));
  }
  return reply;
}

/// The outputs of the last call on the device, brought to the shared region.
json fetch_job(const json&) {
  if (!g_setup || !g_setup->candidate) return failure("protocol_error", "fetch without a candidate's timed call");
  Setup& s = *g_setup;
  if (s.dev) download_outputs(s);
  pass_region(s.region);
  return region_reply(*s.task, s.shape);
}

/// After the timed calls: the inputs must be unchanged (a candidate's), the GPU baseline must agree
/// with the C++ reference (the trusted runner's), and the clocks seen while timing.
json time_end_job(const json&) {
  if (!g_setup) return failure("protocol_error", "time_end before time_prepare");
  Setup& s = *g_setup;
  json reply = {{"ok", true}};
  if (s.candidate) {
    if (s.dev)
      for (size_t i = 0; i < s.inputs.size(); ++i)
        dev_check(s, s.dev->download(s.inputs[i].data(), s.d_in[i], s.inputs[i].nbytes()), "download of an input");
    if (auto c = input_change(s); !c.empty()) throw JobFailure{"rejected", c + " during timing"};
    if (s.dev && s.dev->reads_clocks()) {
      s.clocks.sample(*s.dev);
      reply["clocks"] = s.clocks.to_json(*s.dev);
    }
    return reply;
  }
  if (s.gpu_baseline) {
    // The GPU baseline must be right too, or its time means nothing.
    call(s.gpu_baseline, s, true, "GPU baseline");
    dev_check(s, s.dev->synchronize(), "after the GPU baseline");
    std::vector<HostTensor> got;
    for (size_t i = 0; i < s.outs.size(); ++i) {
      got.emplace_back(s.outs[i].dtype(), s.outs[i].shape());
      dev_check(s, s.dev->download(got[i].data(), s.d_out[i], got[i].nbytes()), "download of the baseline");
    }
    call(s.fn, s, false, "reference");
    CompareStats st;
    for (size_t i = 0; i < s.outs.size(); ++i)
      compare_output(got[i], s.outs[i], s.task->tolerance_for(s.task->outputs[i]), s.task->outputs[i].name, 0, 1, st);
    if (!st.ok())
      return failure("reference_failed", "the task's GPU baseline (reference.cu) disagrees with its CPU reference: " + st.to_json().dump());
  }
  reply["baseline_kind"] = s.gpu_baseline ? "gpu" : "cpu";
  return reply;
}

json machine_job(const json& req) {
  const std::string target = req.value("target", "cpu");
  const DeviceFor device = accelerator(target);
  if (!device.known) return failure("protocol_error", "unknown target " + target);
  if (Accelerator* dev = device.device) {
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

void set_trusted() { g_trusted = true; }

json handle(const json& req) {
  const std::string op = req.value("op", "");
  try {
    if (op == "hello") return {{"ok", true}, {"protocol", 2}, {"trusted", g_trusted}};
    if (op == "machine") return machine_job(req);
    if (g_trusted) {
      // This process never loads candidate code: the reference's answers are safe here.
      if (req.contains("candidate"))
        return failure("protocol_error", "the trusted runner serves the reference only; it loads no candidate");
      if (op == "reference") return reference_job(req);
    } else {
      if (op == "call") return call_job(req);
      if (op == "run") return run_job(req);
      if (op == "fetch") return fetch_job(req);
    }
    if (op == "time_prepare") return time_prepare_job(req);
    if (op == "time_call") return time_call_job(req);
    if (op == "time_end") return time_end_job(req);
    return failure("protocol_error", "unknown op \"" + op + "\"" + (g_trusted ? " for the trusted runner" : " for a candidate's runner"));
  } catch (const JobFailure& f) {
    return failure(f.kind, f.detail, f.fatal);
  } catch (const json::exception& e) {
    return failure("protocol_error", std::string("malformed request: ") + e.what());
  } catch (const std::bad_alloc&) {
    return failure("crashed", "out of memory while preparing the job (the runner's address-space limit)");
  }
}

}  // namespace kfab::runner
