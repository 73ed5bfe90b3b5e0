#pragma once
/// The jobs a runner executes (docs/runner-protocol.md). A runner plays one of two roles:
/// - a candidate's runner loads only the candidate: `call` (one call on a seed's inputs, its outputs
///   passed to kfab as shared memory), `time_prepare` / `time_call` / `fetch` / `time_end` (timed calls,
///   one per job, on inputs changed anew for each call), `run` (for a profiler);
/// - the trusted runner (kfab-runner --trusted) never loads candidate code: `reference` (the oracle's
///   outputs for a seed, as shared memory), the same timing jobs for the baseline (the C++ reference
///   or the task's GPU baseline), and `machine` (a bandwidth measurement for the roofline).
/// Each takes a request and returns a reply object.

#include <nlohmann/json.hpp>

namespace kfab::runner {

nlohmann::json handle(const nlohmann::json& request);

/// This runner serves the reference only: a job that names a candidate is refused.
void set_trusted();

}  // namespace kfab::runner
