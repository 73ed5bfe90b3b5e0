#pragma once
/// Self-contained HTML reports (inline CSS and SVG, nothing fetched, no script) for an optimization
/// run and for a bench. The renderers take the JSON kfab stores and never throw: a missing or
/// mistyped field renders as "—" or is left out.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kfab {

/// A line diff of `before` -> `after` in unified style: lines prefixed " ", "-", "+", with
/// "@@ -a,b +c,d @@" hunk headers and 3 lines of context; empty when identical. LCS-based after
/// trimming the common prefix and suffix; above ~2000x2000 remaining lines it falls back to a
/// whole-block replacement.
std::string unified_diff(const std::string& before, const std::string& after);

/// HTML-escapes & < > " '.
std::string html_escape(std::string_view s);

/// One self-contained HTML page for one optimization run (the run object kfab stores: header
/// fields, machine, steps with their verdicts and sources).
std::string render_run_html(const nlohmann::json& run);

/// One self-contained HTML page for a bench (a suite of tasks, each with its run).
std::string render_bench_html(const nlohmann::json& bench);

}  // namespace kfab
