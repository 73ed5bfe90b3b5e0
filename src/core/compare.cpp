#include "core/compare.h"

#include <cmath>
#include <limits>

namespace kfab {

static nlohmann::json num(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

nlohmann::json CompareStats::to_json() const {
  nlohmann::json j = {{"max_abs_err", num(max_abs)}, {"max_rel_err", num(max_rel)},
                      {"tolerance_used", num(tol_used)}, {"checked", checked},        {"mismatches", mismatches},
                      {"nonfinite", nonfinite}};
  if (first) {
    j["first_mismatch"] = {{"output", first->output}, {"index", first->index}, {"coord", first->coord},
                           {"got", num(first->got)},  {"want", num(first->want)},
                           {"seed", first->seed},      {"call", first->call}};
  }
  return j;
}

void compare_output(const HostTensor& got, const HostTensor& want, const Tolerance& tol,
                    const std::string& name, int64_t seed, int call, CompareStats& st) {
  const size_t n = want.numel();
  const auto& shape = want.shape();
  for (size_t i = 0; i < n; ++i) {
    const double g = got.at(i);
    const double w = want.at(i);
    bool ok;
    if (std::isnan(w)) {
      ok = std::isnan(g);
    } else if (std::isinf(w)) {
      ok = g == w;
    } else if (!std::isfinite(g)) {
      ok = false;
      ++st.nonfinite;
    } else {
      const double abs = std::fabs(g - w);
      const double rel = w != 0.0 ? abs / std::fabs(w) : (abs > 0.0 ? abs : 0.0);
      if (abs > st.max_abs) st.max_abs = abs;
      if (rel > st.max_rel) st.max_rel = rel;
      const double allowed = tol.atol + tol.rtol * std::fabs(w);
      const double used = allowed > 0.0 ? abs / allowed : (abs > 0.0 ? std::numeric_limits<double>::infinity() : 0.0);
      if (used > st.tol_used) st.tol_used = used;
      ok = abs <= allowed;
    }
    ++st.checked;
    if (ok) continue;
    ++st.mismatches;
    if (!std::isfinite(g) || !std::isfinite(w)) {  // a NaN or infinity on either side: the error is infinite, never 0
      st.max_abs = st.max_rel = st.tol_used = std::numeric_limits<double>::infinity();
    }
    if (!st.first) {
      Mismatch m;
      m.output = name;
      m.index = i;
      m.coord.resize(shape.size());
      size_t rest = i;
      for (size_t d = shape.size(); d-- > 0;) {
        m.coord[d] = static_cast<int64_t>(rest % static_cast<size_t>(shape[d]));
        rest /= static_cast<size_t>(shape[d]);
      }
      m.got = g;
      m.want = w;
      m.seed = seed;
      m.call = call;
      st.first = m;
    }
  }
}

}  // namespace kfab
