#pragma once
/// Profiling a candidate with Nsight Compute: ncu runs `kfab-runner --job` on one tuning shape and
/// reads a fixed set of metrics per kernel, for the agents and the reports. Clocks are left alone
/// (--clock-control none): kfab never changes the GPU's settings.

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/expected.h"
#include "core/task.h"

namespace kfab {

/// The metrics kfab asks ncu for, and the names it reports them under.
const std::vector<std::pair<std::string, std::string>>& profile_metrics();

/// Runs ncu on `calls` calls of the built candidate; the result, per kernel name: every metric (mean
/// over the launches profiled), "launches" and "top_stalls". An Error says why ncu could not profile
/// (absent, no permission to read counters, ...).
Expected<nlohmann::json> ncu_profile(const Task& task, const std::filesystem::path& artifact,
                                     const std::filesystem::path& reference, const std::string& target,
                                     const ShapeBinding& shape, uint64_t base_seed, double timeout_s);

/// Parses ncu's --csv --page raw-less output (one row per kernel launch and metric) into the result above.
Expected<nlohmann::json> parse_ncu_csv(const std::string& csv);

}  // namespace kfab
