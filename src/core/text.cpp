#include "core/text.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kfab {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

/// The length of the well-formed UTF-8 sequence at the start of `s`, or 0 where it is ill-formed;
/// `*maximal` is then the length of its maximal subpart (at least 1), the bytes one U+FFFD replaces.
size_t sequence_length(std::string_view s, size_t* maximal) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = b(0);
  *maximal = 1;
  if (lead < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) n = 2;
  else if (lead >= 0xE0 && lead <= 0xEF) n = 3, lo = lead == 0xE0 ? 0xA0 : 0x80, hi = lead == 0xED ? 0x9F : 0xBF;
  else if (lead >= 0xF0 && lead <= 0xF4) n = 4, lo = lead == 0xF0 ? 0x90 : 0x80, hi = lead == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  for (size_t i = 1; i < n; ++i) {
    const bool ok = i < s.size() && b(i) >= (i == 1 ? lo : 0x80) && b(i) <= (i == 1 ? hi : 0xBF);
    if (!ok) return 0;
    *maximal = i + 1;
  }
  return n;
}

bool harmless_control(unsigned char c) { return c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

std::string printable(std::string_view text, size_t max_bytes, Keep keep) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  for (size_t i = 0; i < text.size();) {
    size_t maximal = 1;
    const size_t n = sequence_length(text.substr(i), &maximal);
    const auto c = static_cast<unsigned char>(text[i]);
    if (n == 0 || (c < 0x20 && !harmless_control(c))) {
      out += kReplacement;
      i += n == 0 ? maximal : 1;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  if (out.size() <= max_bytes) return out;
  // `out` is valid UTF-8 now: a character begins at every byte that is not a continuation byte.
  const auto continues = [&](size_t i) { return i < out.size() && (static_cast<unsigned char>(out[i]) & 0xC0) == 0x80; };
  if (keep == Keep::Head) {
    size_t end = max_bytes;
    while (end > 0 && continues(end)) --end;
    return out.substr(0, end) + " [... " + std::to_string(out.size() - end) + " more bytes cut]";
  }
  size_t begin = out.size() - max_bytes;
  while (continues(begin)) ++begin;
  return "[... " + std::to_string(begin) + " bytes cut] " + out.substr(begin);
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find(sep, at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view piece = text.substr(at, end - at);
    while (!piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    while (!piece.empty() && piece.back() == ' ') piece.remove_suffix(1);
    if (!piece.empty()) out.emplace_back(piece);
    at = end + 1;
  }
  return out;
}

std::string dump_json(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kfab
