#include "tuner/precision.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace kfab {

bool reduced_precision(const TemplateParams& p) {
  const auto it = p.find("precision");
  if (it == p.end() || (it->second != "tf32" && it->second != "tf32+bf16" && it->second != "bf16" && it->second != "fp16")) return false;
  // a half-precision task's own type (`io`: the operands' and output's) is not a reduction of it
  const auto io = p.find("io");
  return io == p.end() || io->second != it->second;
}

double worst_tolerance_used(const nlohmann::json& shapes) {
  if (!shapes.is_array()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (const auto& sh : shapes) {
    if (!sh.is_object() || !sh.value("correct", false)) continue;
    const auto it = sh.find("tolerance_used");
    worst = std::max(worst, it != sh.end() && it->is_number() ? it->get<double>() : std::numeric_limits<double>::infinity());
  }
  return worst;
}

double worst_tolerance_used(const Verdict& v) {
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& sh : v.shapes) shapes.push_back(sh.to_json());
  return worst_tolerance_used(shapes);
}

std::string precision_refusal(const TemplateParams& p, double worst) {
  if (!reduced_precision(p) || worst <= kReducedPrecisionShare) return {};
  return fmt::format("passed in {} using {:.3g} of the tolerance at its worst element; a reduced precision is kept only within {:.2g}",
                     p.at("precision"), worst, kReducedPrecisionShare);
}

Verdict refused_verdict(const Verdict& passed, const std::string& why) {
  Verdict v = passed;
  v.disposition = Disposition::Rejected;
  v.detail = "not kept: " + why + " (" + passed.detail + ")";
  return v;
}

}  // namespace kfab
