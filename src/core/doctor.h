#pragma once
/// What is here: compilers, the CUDA toolkit, GPUs (libcuda through dlopen), Python with torch and
/// triton, OpenCL platforms, ncu. Absence is reported, never an error.

#include <nlohmann/json.hpp>

#include <string>

namespace kfab {

/// One object per area: {"compilers": [...], "cuda": {...}, "gpus": [...], "python": {...},
/// "opencl": [...], "ncu": {...}}. Each entry says "found" and what was found or why not.
nlohmann::json probe_system();

/// The NVIDIA GPUs, through libcuda.so.1 loaded with dlopen: {"found", "why"?, "driver_version",
/// "devices": [{"index", "name", "memory_GiB", "compute_capability"}]}.
nlohmann::json probe_gpus();

/// The same answer through NVML (libnvidia-ml.so.1), which reads the devices without initialising
/// CUDA: tens of ms where cuInit takes a few hundred. Used only where NVML's list is CUDA's device 0:
/// CUDA_VISIBLE_DEVICES unset and every device of one name and compute capability (NVML orders
/// devices by PCI bus, CUDA fastest first). Otherwise, or without NVML: {"found": false, "why"}, and
/// the caller asks probe_gpus(). Adds "via": "nvml".
nlohmann::json probe_gpus_nvml();

/// The PCI address ("0000:00:06.0") of the GPU NVML numbers `index` (PCI bus order: the order of
/// nvidia-smi and of CUDA_DEVICE_ORDER=PCI_BUS_ID), or "" where NVML cannot say.
std::string gpu_pci_address(unsigned index);

/// OpenCL platforms through libOpenCL.so.1 loaded with dlopen: {"found", "why"?, "platforms": [...]}.
nlohmann::json probe_opencl();

}  // namespace kfab
