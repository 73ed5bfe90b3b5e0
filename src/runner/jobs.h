#pragma once
/// The jobs a runner executes for one candidate on the CPU: verify (seeds x one shape, candidate ->
/// reference -> candidate), time (interleaved with the reference, caches flushed) and machine (a
/// bandwidth measurement for the roofline). Each takes a request and returns a reply object.

#include <nlohmann/json.hpp>

namespace kfab::runner {

nlohmann::json handle(const nlohmann::json& request);

}  // namespace kfab::runner
