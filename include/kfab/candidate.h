/* kfab native candidate ABI, version 1 (DESIGN.md section 2.1).
 *
 * Every native candidate (C++ for the CPU, CUDA C++, OpenCL host + kernel) is one source file that
 * exports kfab_run. This header is plain C so that it can be included from C, C++ and CUDA sources.
 *
 * - Outputs are preallocated by kfab (and filled with NaN or a sentinel before every call).
 * - Inputs must not be modified; kfab checks them after every call.
 * - Shapes differ between calls (held-out shapes): read them from the tensors, never assume them.
 * - Return 0 on success; any other value is reported as a runtime failure.
 */
#ifndef KFAB_CANDIDATE_H
#define KFAB_CANDIDATE_H

#include <stdint.h>

#define KFAB_ABI_VERSION 1

#if defined(_WIN32)
#define KFAB_EXPORT_VISIBILITY __declspec(dllexport)
#else
#define KFAB_EXPORT_VISIBILITY __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
#define KFAB_EXPORT extern "C" KFAB_EXPORT_VISIBILITY
#else
#define KFAB_EXPORT KFAB_EXPORT_VISIBILITY
#endif

typedef enum {
  KFAB_F32 = 0,
  KFAB_F16 = 1,
  KFAB_BF16 = 2,
  KFAB_F64 = 3,
  KFAB_I32 = 4,
  KFAB_I64 = 5,
  KFAB_I8 = 6,
  KFAB_U8 = 7,
  KFAB_BOOL = 8
} kfab_dtype;

typedef struct {
  void* data;             /* host pointer (cpu) or device pointer (cuda, opencl: cl_mem) */
  kfab_dtype dtype;
  int32_t ndim;           /* 0 for a scalar (one element) */
  const int64_t* shape;   /* ndim entries */
  const int64_t* strides; /* ndim entries, in elements */
} kfab_tensor;

/* 0 = success; anything else is reported as a runtime failure.
 * stream: cudaStream_t (cuda), cl_command_queue (opencl), NULL (cpu). Work must be enqueued on it.
 * A KernelBench-format task's Python number input (an addition to version 1) arrives as a 0-dim tensor
 * on the task's device: KFAB_F32 for a float, KFAB_I64 for an int. */
KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream);

/* Optional (an addition to version 1), KernelBench-format tasks only: when a candidate exports it,
 * kfab calls it once per shape, before any kfab_run at that shape, with the numbers of the Model's
 * get_init_inputs() in order (nested lists flattened; anything not a number passed as NaN): the
 * constructor arguments no tensor carries, such as a group norm's num_groups. 0 = success. */
KFAB_EXPORT int kfab_init(const double* init_inputs, int32_t n_init_inputs);

#endif /* KFAB_CANDIDATE_H */
