#include "agent/extract.h"

#include <vector>

namespace kfab {

namespace {

struct Block {
  std::string lang;
  std::string code;
  bool closed = true;
};

std::vector<Block> fenced_blocks(const std::string& text) {
  std::vector<Block> out;
  size_t pos = 0;
  while (true) {
    size_t open = text.find("```", pos);
    if (open == std::string::npos) break;
    // A fence opens at the start of a line (after optional spaces).
    size_t line_start = text.rfind('\n', open);
    line_start = line_start == std::string::npos ? 0 : line_start + 1;
    if (text.find_first_not_of(" \t", line_start) != open) {
      pos = open + 3;
      continue;
    }
    size_t eol = text.find('\n', open);
    if (eol == std::string::npos) break;
    Block b;
    b.lang = text.substr(open + 3, eol - open - 3);
    while (!b.lang.empty() && (b.lang.back() == ' ' || b.lang.back() == '\r')) b.lang.pop_back();
    size_t close = eol + 1;
    for (;;) {
      close = text.find("```", close);
      if (close == std::string::npos) break;
      size_t ls = text.rfind('\n', close);
      if (ls != std::string::npos && text.find_first_not_of(" \t", ls + 1) == close) break;
      close += 3;
    }
    if (close == std::string::npos) {
      b.code = text.substr(eol + 1);
      b.closed = false;
      out.push_back(b);
      break;
    }
    b.code = text.substr(eol + 1, close - eol - 1);
    out.push_back(b);
    pos = close + 3;
  }
  return out;
}

bool has_entry(const std::string& code, const std::string& dsl) {
  if (dsl == "modelnew") return code.find("class ModelNew") != std::string::npos;
  if (dsl == "triton" || dsl == "python") return code.find("def run(") != std::string::npos;
  return code.find("kfab_run") != std::string::npos;
}

std::string entry_name(const std::string& dsl) {
  if (dsl == "modelnew") return "class ModelNew";
  if (dsl == "triton" || dsl == "python") return "def run(inputs, outputs)";
  return "kfab_run";
}

}  // namespace

Expected<Extracted> extract_code(const std::string& reply, const std::string& dsl) {
  if (reply.find_first_not_of(" \t\r\n") == std::string::npos)
    return make_error("the reply was empty: answer with the whole candidate file in one fenced code block");
  const auto blocks = fenced_blocks(reply);
  const Block* pick = nullptr;
  for (const auto& b : blocks)
    if (has_entry(b.code, dsl)) pick = &b;  // the last block with the entry point
  if (pick != nullptr) return Extracted{pick->code, !pick->closed};
  if (blocks.empty() && has_entry(reply, dsl)) return Extracted{reply, false};  // bare code, no fences
  if (!blocks.empty())
    return make_error("none of the " + std::to_string(blocks.size()) + " code blocks in the reply defines " + entry_name(dsl) +
                      ": answer with the whole candidate file, entry point included, in one fenced code block");
  return make_error("the reply has no code block: answer with the whole candidate file in one fenced code block (```)");
}

}  // namespace kfab
