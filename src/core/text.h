#pragma once
/// Text from outside kfab (a candidate's output, a compiler's message, an LLM provider's reply) made
/// safe to store, print and put in JSON: whatever bytes arrive, kfab shows them and goes on.

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kfab {

/// Which end of a long text printable() keeps.
enum class Keep { Head, Tail };

/// `text` as valid UTF-8 that prints harmlessly. Each ill-formed sequence (a stray continuation byte,
/// a byte that cannot begin one, a sequence cut short, an overlong form, a surrogate, a code point past
/// U+10FFFF) and each control character but tab, newline and carriage return becomes one U+FFFD, after
/// Unicode's "maximal subpart" practice. A result longer than `max_bytes` is cut at a character
/// boundary, keeping its head or its tail, and says how many bytes it lost. Never throws.
std::string printable(std::string_view text, size_t max_bytes = SIZE_MAX, Keep keep = Keep::Head);

/// The pieces of `text` between `sep`s, each without the spaces around it; empty pieces are left out.
std::vector<std::string> split(std::string_view text, char sep);

/// `j` as JSON text; strings that are not valid UTF-8 are written with U+FFFD for the bad bytes where
/// nlohmann's plain dump() would throw. For JSON that goes to the store, stdout or a file.
std::string dump_json(const nlohmann::json& j, int indent = -1);

}  // namespace kfab
