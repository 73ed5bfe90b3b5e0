#pragma once
/// `kfab mcp`: a Model Context Protocol server on stdio (JSON-RPC 2.0, one message per line) through
/// which a coding agent drives kfab. Tools: list_tasks, describe_task, evaluate, check_heldout, profile,
/// history, best. evaluate and profile run `kfab eval --json` in a process of their own, so a tool result is
/// exactly what the CLI prints.

#include <iosfwd>
#include <string>

namespace kfab::cli {

/// Serves requests from `in` until end of input; replies go to `out`. Returns the exit code.
int serve_mcp(std::istream& in, std::ostream& out);

/// An AGENTS.md-style brief for a coding agent that drives kfab through `kfab_path mcp`: the loop, the
/// rules kfab holds a candidate to, every tool (from the server's own list) and an MCP configuration.
std::string agent_brief(const std::string& kfab_path);

}  // namespace kfab::cli
