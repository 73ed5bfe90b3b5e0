#pragma once
/// Identifiers and times for runs and benches.

#include <string>

namespace kfab {

/// A new run or bench id: the UTC time and 16 random bits, "20261124-093000-1a2b" (sorts by time).
std::string new_run_id();
/// The UTC time now in ISO 8601, "2026-11-24T09:30:00Z".
std::string utc_now_iso();

}  // namespace kfab
