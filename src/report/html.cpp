#include "report/html.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <numbers>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/text.h"

namespace kfab {

using json = nlohmann::json;

namespace {

constexpr size_t kDiffContext = 3;
constexpr size_t kDiffMaxCells = size_t{2000} * 2000;  ///< LCS table size above which the diff replaces the whole block
constexpr size_t kDetailChars = 160;
constexpr size_t kNoteChars = 200;
constexpr size_t kHashChars = 10;
constexpr size_t kMaxShapeColumns = 6;
constexpr double kLogRangeRatio = 10.0;    ///< the trajectory goes log above this max/min speedup
constexpr double kDenseLogRatio = 1000.0;  ///< log axes tick 1-2-5 up to this range, decades above
constexpr double kTargetTicks = 5.0;
constexpr size_t kMaxTicks = 24;
constexpr double kMaxSeq = 1e9;  ///< a step number beyond this is garbage: the step's index stands in
constexpr double kEps = 1e-9;
constexpr double kPad = 1.15;  ///< log-axis headroom around the data
constexpr std::string_view kDash = "—";
constexpr std::string_view kInk = "#495057";
constexpr std::string_view kGrid = "#e9ecef";
constexpr std::string_view kBest = "#1c7ed6";
constexpr std::string_view kPass = "#2f9e44";
constexpr std::string_view kFail = "#e03131";
constexpr std::string_view kOther = "#868e96";

struct Tone {
  std::string_view disposition, colour;
};
constexpr Tone kTones[] = {{"passed", kPass},  {"incorrect", "#e8590c"}, {"compile_failed", "#7048e8"}, {"runtime_failed", "#c2255c"},
                           {"crashed", kFail}, {"timeout", "#f59f00"},   {"rejected", "#343a40"}};
constexpr std::string_view kPalette[] = {"#1c7ed6", "#e8590c", "#2f9e44", "#ae3ec9", "#f59f00",
                                         "#0c8599", "#e03131", "#5c940d", "#6741d9", "#868e96"};

constexpr std::string_view kCss = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#212529;max-width:1200px;margin:24px auto;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;padding-bottom:4px;border-bottom:1px solid #dee2e6}
h3{font-size:15px;margin:14px 0 6px}.meta{color:#495057;margin:2px 0}.summary{font-size:15px;margin:12px 0}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{padding:3px 8px;border-bottom:1px solid #dee2e6;text-align:left;vertical-align:top}
th{background:#f1f3f5;font-weight:600;white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.pass{color:#2b8a3e;font-weight:600}.fail{color:#c92a2a;font-weight:600}.mute,.empty{color:#868e96}.empty{font-style:italic}
tr.best td{background:#ebfbee}.nowrap{white-space:nowrap}
details{margin:6px 0;border:1px solid #dee2e6;border-radius:4px;padding:4px 10px}
details details{border-color:#e9ecef}summary{cursor:pointer}
pre{background:#f8f9fa;padding:8px;overflow:auto;max-height:640px;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre.diff span{display:block;white-space:pre}pre.diff .add{background:#e6ffec;color:#1a7f37}
pre.diff .del{background:#ffebe9;color:#cf222e}pre.diff .hunk{color:#0969da}
.scores{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.score{border:1px solid #dee2e6;border-radius:6px;padding:8px 14px;min-width:110px}
.score .v{display:block;font-size:20px;font-weight:600;font-variant-numeric:tabular-nums}.score .k{color:#868e96;font-size:12px}
svg.chart{display:block;max-width:100%;height:auto;margin:8px 0}.error{color:#c92a2a;white-space:pre-wrap}
footer{margin-top:32px;color:#adb5bd;font-size:12px}
)";

// ---- JSON access that never throws -------------------------------------------------------------

const json& field(const json& j, const char* key) {
  static const json null;
  if (!j.is_object()) return null;
  const auto it = j.find(key);
  return it == j.end() ? null : *it;
}

const json& list(const json& j, const char* key) {
  static const json empty = json::array();
  const json& v = field(j, key);
  return v.is_array() ? v : empty;
}

std::string dump(const json& j) { return dump_json(j); }

std::optional<double> number(const json& j) {
  if (!j.is_number()) return std::nullopt;
  const double v = j.get<double>();
  return std::isfinite(v) ? std::optional(v) : std::nullopt;
}
std::optional<double> number(const json& j, const char* key) { return number(field(j, key)); }
std::optional<double> positive(std::optional<double> v) { return v && *v > 0 ? v : std::nullopt; }

std::string text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  return j.is_number() || j.is_boolean() ? dump(j) : std::string();
}
std::string text(const json& j, const char* key) { return text(field(j, key)); }

// ---- formatting --------------------------------------------------------------------------------

std::string esc_or_dash(const std::string& s) { return s.empty() ? std::string(kDash) : html_escape(s); }

/// At most `n` bytes, cut on a UTF-8 boundary, with an ellipsis when cut.
std::string truncate(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n) + "…";
}

std::string fmt_x(std::optional<double> v) { return v ? fmt::format("{:.2f}x", *v) : std::string(kDash); }
std::string fmt_pct(std::optional<double> v) { return v ? fmt::format("{:.1f}%", *v) : std::string(kDash); }
std::string fmt_sig(std::optional<double> v) {
  if (!v) return std::string(kDash);
  return std::fabs(*v) >= 1000 ? fmt::format("{:.0f}", *v) : fmt::format("{:.4g}", *v);
}
std::string fmt_err(std::optional<double> v) {
  if (!v) return std::string(kDash);
  return *v == 0 ? "0" : fmt::format("{:.2e}", *v);
}
std::string fmt_seconds(std::optional<double> s) {
  constexpr double kMinute = 60, kHour = 3600;
  if (!s) return std::string(kDash);
  if (*s < kMinute) return fmt::format("{:.1f} s", *s);
  const auto whole = static_cast<long>(*s);
  if (*s < kHour) return fmt::format("{}m {:02}s", whole / 60, whole % 60);
  return fmt::format("{}h {:02}m", whole / 3600, whole % 3600 / 60);
}

std::string shape_label(const json& shape) {
  if (!shape.is_object()) return shape.is_null() ? std::string() : dump(shape);
  std::string s;
  for (const auto& [k, v] : shape.items()) s += (s.empty() ? "" : " ") + k + "=" + (v.is_string() ? v.get<std::string>() : dump(v));
  return s;
}

std::string_view disposition_colour(std::string_view d) {
  for (const Tone& t : kTones)
    if (t.disposition == d) return t.colour;
  return kOther;
}

std::string_view status_class(std::string_view s) {
  if (s == "passed") return "pass";
  return s.empty() || s == "not_run" ? "mute" : "fail";
}

std::string status_html(const std::string& s) {
  if (s.empty()) return std::string(kDash);
  return fmt::format(R"(<span class="{}">{}</span>)", status_class(s), html_escape(s));
}

std::string num_td(const std::string& s, const std::string& title = {}) {
  if (title.empty()) return "<td class=\"num\">" + s + "</td>";
  return fmt::format(R"(<td class="num" title="{}">{}</td>)", html_escape(title), s);
}

/// A header row; a name starting with '#' heads a right-aligned numeric column (the '#' is dropped).
std::string header_row(const std::vector<std::string>& cols) {
  std::string s = "<tr>";
  for (const auto& c : cols)
    s += c.starts_with('#') ? "<th class=\"num\">" + html_escape(c.substr(1)) + "</th>" : "<th>" + html_escape(c) + "</th>";
  return s + "</tr>\n";
}

// ---- SVG charts --------------------------------------------------------------------------------

std::string px(double v) { return fmt::format("{:.1f}", v); }

std::string tick_label(double v) {
  constexpr double kBig = 1e5, kSmall = 1e-3;
  if (v == 0) return "0";
  return std::fabs(v) >= kBig || std::fabs(v) < kSmall ? fmt::format("{:.0e}", v) : fmt::format("{:g}", v);
}

/// A mapping from data to pixels. Linear scales tick every `step`; log scales at 1-2-5 or decades.
struct Scale {
  double lo = 0.0, hi = 1.0, p0 = 0.0, p1 = 1.0, step = 1.0;
  bool log = false;

  double operator()(double v) const {
    const double t = log ? std::log10(v / lo) / std::log10(hi / lo) : (v - lo) / (hi - lo);
    return p0 + std::clamp(t, 0.0, 1.0) * (p1 - p0);
  }
  std::vector<double> ticks() const {
    std::vector<double> out;
    if (!log) {
      for (double i = std::ceil(lo / step - kEps); i * step <= hi + step * kEps && out.size() < kMaxTicks; ++i) out.push_back(i * step);
      return out;
    }
    const bool dense = hi / lo <= kDenseLogRatio;
    const double stride = std::pow(10.0, std::ceil(std::log10(hi / lo) / static_cast<double>(kMaxTicks)));  // decades per tick
    for (double mag = std::pow(10.0, std::floor(std::log10(lo))); mag <= hi * (1 + kEps) && out.size() < kMaxTicks; mag *= stride)
      for (double f : {1.0, 2.0, 5.0})
        if ((dense || f == 1.0) && f * mag >= lo * (1 - kEps) && f * mag <= hi * (1 + kEps)) out.push_back(f * mag);
    return out;
  }
};

/// The 1-2-5 step nearest (geometrically) to a span's share of kTargetTicks.
double nice_step(double span) {
  const double raw = span / kTargetTicks, mag = std::pow(10.0, std::floor(std::log10(raw))), r = raw / mag;
  return (r < std::sqrt(2.0) ? 1.0 : r < std::sqrt(10.0) ? 2.0 : r < std::sqrt(50.0) ? 5.0 : 10.0) * mag;
}

/// Ticks at a 1-2-5 step of at least `min_step`; the domain widens to whole steps when `snap`.
Scale linear_scale(double lo, double hi, double p0, double p1, double min_step = 0.0, bool snap = true) {
  if (!(hi > lo)) hi = lo + 1;
  const double step = std::max(min_step, nice_step(hi - lo));
  if (!snap) return {lo, hi, p0, p1, step, false};
  return {std::floor(lo / step + kEps) * step, std::ceil(hi / step - kEps) * step, p0, p1, step, false};
}

double decade(double v) { return std::pow(10.0, std::floor(std::log10(v))); }
double snap_down(double v) {
  double best = decade(v);
  for (double f : {2.0, 5.0})
    if (f * decade(v) <= v * (1 + kEps)) best = f * decade(v);
  return best;
}
double snap_up(double v) {
  for (double f : {1.0, 2.0, 5.0})
    if (f * decade(v) >= v * (1 - kEps)) return f * decade(v);
  return 10 * decade(v);
}

Scale log_scale(double lo, double hi, double p0, double p1) {
  lo = snap_down(lo / kPad);
  hi = snap_up(hi * kPad);
  if (hi / lo > kDenseLogRatio) {
    lo = decade(lo);
    hi = decade(hi) < hi ? decade(hi) * 10 : hi;
  }
  return {lo, hi, p0, p1, 0.0, true};
}

constexpr double kPlotW = 598, kPlotH = 254;  ///< plot area of a chart, inside its margins
constexpr double kLeft = 62, kRight = 20, kTop = 20, kBottom = 46;

struct Frame {
  double w, h, left, right, top, bottom;
  double x0() const { return left; }
  double x1() const { return w - right; }
  double y0() const { return h - bottom; }
  double y1() const { return top; }
};

std::string svg_open(std::string_view cls, const Frame& f, std::string_view label) {
  return fmt::format(R"(<svg class="chart {}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" width="{}" height="{}" )"
                     R"(font-family="system-ui,sans-serif" font-size="11" role="img" aria-label="{}">)"
                     "\n",
                     cls, f.w, f.h, f.w, f.h, html_escape(label));
}

std::string line(double x1, double y1, double x2, double y2, std::string_view colour, std::string_view extra = {}) {
  return fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}"{}/>)", px(x1), px(y1), px(x2), px(y2), colour, extra) + "\n";
}

std::string label(double x, double y, std::string_view anchor, const std::string& s, std::string_view extra = {},
                  std::string_view colour = kInk) {
  return fmt::format(R"(<text x="{}" y="{}" text-anchor="{}" fill="{}"{}>{}</text>)", px(x), px(y), anchor, colour, extra, html_escape(s)) +
         "\n";
}

/// Grid, axis lines, tick labels and titles; no x ticks for a category axis.
std::string axes(const Scale& x, const Scale& y, const std::string& x_title, const std::string& y_title, bool x_ticks = true) {
  constexpr double kTickGap = 6, kXLabelDrop = 16, kXTitleDrop = 34, kYTitleX = 14;
  std::string s;
  for (double t : y.ticks()) {
    s += line(x.p0, y(t), x.p1, y(t), kGrid);
    s += label(x.p0 - kTickGap, y(t) + 4, "end", tick_label(t));
  }
  if (x_ticks)
    for (double t : x.ticks()) {
      s += line(x(t), y.p0, x(t), y.p1, kGrid);
      s += label(x(t), y.p0 + kXLabelDrop, "middle", tick_label(t));
    }
  s += line(x.p0, y.p0, x.p1, y.p0, kInk) + line(x.p0, y.p0, x.p0, y.p1, kInk);
  if (!x_title.empty()) s += label((x.p0 + x.p1) / 2, y.p0 + kXTitleDrop, "middle", x_title);
  const double mid = (y.p0 + y.p1) / 2;
  s += label(kYTitleX, mid, "middle", y_title, fmt::format(R"x( transform="rotate(-90 {} {})")x", kYTitleX, px(mid)));
  return s;
}

/// A row of coloured swatches and names starting at (x, y).
std::string legend_row(double x, double y, const std::vector<std::pair<std::string, std::string>>& items) {
  constexpr double kSwatch = 9, kCharW = 6.3, kGap = 14;
  std::string s;
  for (const auto& [name, colour] : items) {
    s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>)", px(x), px(y - kSwatch), kSwatch, kSwatch, colour) + "\n";
    s += label(x + kSwatch + 4, y, "start", name);
    x += kSwatch + 4 + kCharW * static_cast<double>(name.size()) + kGap;
  }
  return s;
}

std::string step_disposition(const json& step) {
  std::string d = text(step, "disposition");
  return d.empty() ? text(field(step, "verdict"), "disposition") : d;
}
std::optional<double> step_speedup(const json& step) {
  const auto s = positive(number(step, "speedup"));
  return s ? s : positive(number(field(step, "verdict"), "speedup"));
}

std::string trajectory_svg(const json& steps) {
  struct Dot {
    double seq;
    std::optional<double> speedup;  ///< set for a success only
    std::string disposition, role;
  };
  std::vector<Dot> dots;
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string d = step_disposition(steps[i]);
    const auto sp = step_speedup(steps[i]);
    if (d.empty() && !sp) continue;
    const auto seq = number(steps[i], "seq");
    dots.push_back({seq && std::fabs(*seq) < kMaxSeq ? *seq : static_cast<double>(i + 1), d.empty() || d == "passed" ? sp : std::nullopt, d,
                    text(steps[i], "role")});
  }
  if (dots.empty()) return "<p class=\"empty\">no evaluated steps to plot</p>\n";
  std::stable_sort(dots.begin(), dots.end(), [](const Dot& a, const Dot& b) { return a.seq < b.seq; });

  constexpr double kHeadroom = 1.1, kDot = 4.5;
  constexpr double kLegendTop = 10;
  const Frame f{kLeft + kPlotW + kRight, kTop + kLegendTop + kPlotH + kBottom, kLeft, kRight, kTop + kLegendTop, kBottom};
  double lo = 1.0, hi = 1.0;
  for (const Dot& d : dots)
    if (d.speedup) lo = std::min(lo, *d.speedup), hi = std::max(hi, *d.speedup);
  const Scale x = linear_scale(dots.front().seq - 0.5, dots.back().seq + 0.5, f.x0(), f.x1(), 1.0, false);
  const Scale y = hi / lo > kLogRangeRatio ? log_scale(lo, hi, f.y0(), f.y1()) : linear_scale(0.0, hi * kHeadroom, f.y0(), f.y1());

  std::string s = svg_open("trajectory", f, "speedup per step");
  s += axes(x, y, "step", y.log ? "speedup (log)" : "speedup");
  s += line(x.p0, y(1.0), x.p1, y(1.0), kOther, R"( stroke-dasharray="4 3")");
  s += label(x.p1 - 2, y(1.0) - 4, "end", "1.0x");

  std::string best_path;
  std::optional<double> best;
  for (const Dot& d : dots) {
    if (!d.speedup || (best && *d.speedup <= *best)) continue;
    best_path += best ? fmt::format(" {},{}", px(x(d.seq)), px(y(*best))) : "";
    best = d.speedup;
    best_path += fmt::format(" {},{}", px(x(d.seq)), px(y(*best)));
  }
  if (best) {
    best_path += fmt::format(" {},{}", px(x(dots.back().seq)), px(y(*best)));
    s += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5"/>)", best_path, kBest) + "\n";
  }

  std::vector<std::pair<std::string, std::string>> legend;
  for (const Dot& d : dots) {
    const std::string name = d.disposition.empty() ? "evaluated" : d.disposition;
    const std::string colour(disposition_colour(d.disposition));
    if (std::find_if(legend.begin(), legend.end(), [&](const auto& l) { return l.first == name; }) == legend.end())
      legend.emplace_back(name, colour);
    const std::string tip =
        fmt::format("step {}{}: {} {}", tick_label(d.seq), d.role.empty() ? "" : " (" + d.role + ")", name, fmt_x(d.speedup));
    s += d.speedup ? fmt::format(R"(<circle cx="{}" cy="{}" r="{}" fill="{}">)", px(x(d.seq)), px(y(*d.speedup)), kDot, colour)
                   : fmt::format(R"(<circle cx="{}" cy="{}" r="{}" fill="#fff" stroke="{}" stroke-width="1.5">)", px(x(d.seq)), px(y.p0),
                                 kDot, colour);
    s += "<title>" + html_escape(tip) + "</title></circle>\n";
  }
  legend.emplace_back("best so far", std::string(kBest));
  s += legend_row(f.x0(), f.top - 12, legend);
  return s + "</svg>\n";
}

struct Peaks {
  std::optional<double> gflops, gbps;
};

Peaks peaks_of(const json& machine) {
  return {positive(number(machine, "peak_gflops_f32")), positive(number(machine, "copy_bandwidth_GBps"))};
}

/// The first machine with a peak: the given one, else one from a step's verdict.
Peaks find_peaks(const json& machine, const json& steps) {
  Peaks p = peaks_of(machine);
  for (const json& st : steps)
    if (!p.gflops && !p.gbps) p = peaks_of(field(field(st, "verdict"), "machine"));
  return p;
}

struct RoofPoint {
  double ai, gflops;
  std::string title, colour;
};

/// One point per (step, tuning shape) with a timed median and a stated cost.
void roof_points(const json& steps, const std::string& task, const std::string& colour, std::vector<RoofPoint>& out) {
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& st = steps[i];
    const std::string seq = text(st, "seq").empty() ? std::to_string(i + 1) : text(st, "seq");
    for (const json& sh : list(field(st, "verdict"), "shapes")) {
      const auto ms = positive(number(field(sh, "time_ms"), "median"));
      const auto flops = positive(number(sh, "flops")), bytes = positive(number(sh, "bytes"));
      if (field(sh, "heldout") == true || !ms || !flops || !bytes) continue;
      const double ai = *flops / *bytes, gf = *flops / (*ms * 1e6);
      out.push_back({ai, gf,
                     fmt::format("{}step {} · {} · {} GFLOP/s at {} flop/byte", task.empty() ? "" : task + " · ", seq,
                                 shape_label(field(sh, "shape")), fmt_sig(gf), fmt_sig(ai)),
                     colour.empty() ? std::string(disposition_colour(step_disposition(st))) : colour});
    }
  }
}

std::string roofline_svg(const std::vector<RoofPoint>& pts, const Peaks& peaks,
                         const std::vector<std::pair<std::string, std::string>>& legend = {}) {
  if (pts.empty()) return "<p class=\"empty\">no roofline data (the task states no cost)</p>\n";
  constexpr double kLegendW = 180, kDot = 4, kRowH = 16, kTaller = 40;
  const double right = legend.empty() ? kRight : kRight + kLegendW;
  const double h = std::max(kTop + kPlotH + kTaller + kBottom, kTop + kRowH * (static_cast<double>(legend.size()) + 1));
  const Frame f{kLeft + kPlotW + right, h, kLeft, right, kTop, kBottom};
  double xlo = pts[0].ai, xhi = xlo, ylo = pts[0].gflops, yhi = ylo;
  for (const RoofPoint& p : pts) {
    xlo = std::min(xlo, p.ai), xhi = std::max(xhi, p.ai);
    ylo = std::min(ylo, p.gflops), yhi = std::max(yhi, p.gflops);
  }
  const double ridge = peaks.gflops && peaks.gbps ? *peaks.gflops / *peaks.gbps : 0.0;  // where the roof turns flat
  if (peaks.gflops) yhi = std::max(yhi, *peaks.gflops);
  if (ridge > 0) xlo = std::min(xlo, ridge), xhi = std::max(xhi, ridge);
  const Scale x = log_scale(xlo, xhi, f.x0(), f.x1()), y = log_scale(ylo, yhi, f.y0(), f.y1());

  std::string s = svg_open("roofline", f, "roofline: GFLOP/s against arithmetic intensity");
  s += axes(x, y, "arithmetic intensity (flop/byte)", "GFLOP/s");
  const auto roof = [&](double ai) { return std::min(peaks.gflops.value_or(HUGE_VAL), peaks.gbps ? ai * *peaks.gbps : HUGE_VAL); };
  const double start = peaks.gbps ? std::max(x.lo, y.lo / *peaks.gbps) : x.lo;  // where the roof enters the plot
  const double end = peaks.gbps && !peaks.gflops ? std::min(x.hi, y.hi / *peaks.gbps) : x.hi;
  if ((peaks.gflops || peaks.gbps) && end > start) {
    std::vector<double> xs{start};
    if (ridge > start && ridge < end) xs.push_back(ridge);
    xs.push_back(end);
    std::string poly;
    for (double v : xs) poly += fmt::format(" {},{}", px(x(v)), px(y(roof(v))));
    s += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>)", poly, kInk) + "\n";
    if (peaks.gflops) s += label(x.p1 - 2, y(*peaks.gflops) - 5, "end", fmt::format("peak {} GFLOP/s", fmt_sig(peaks.gflops)));
    if (peaks.gbps) {  // along the bandwidth slope
      const double angle = std::atan2(y(roof(xs[1])) - y(roof(start)), x(xs[1]) - x(start)) * 180 / std::numbers::pi;
      const double lx = x(start) + 8, ly = y(roof(start)) - 6;
      s += label(lx, ly, "start", fmt::format("copy {} GB/s", fmt_sig(peaks.gbps)),
                 fmt::format(R"x( transform="rotate({:.1f} {} {})")x", angle, px(lx), px(ly)));
    }
  } else if (!peaks.gflops && !peaks.gbps) {
    s += label(x.p1 - 2, y.p1 + 12, "end", "machine peaks unknown: no roof drawn");
  }
  for (const RoofPoint& p : pts)
    s += fmt::format(R"(<circle cx="{}" cy="{}" r="{}" fill="{}" fill-opacity="0.8"><title>{}</title></circle>)", px(x(p.ai)),
                     px(y(p.gflops)), kDot, p.colour, html_escape(p.title)) +
         "\n";
  for (size_t i = 0; i < legend.size(); ++i) s += legend_row(f.x1() + 24, f.top + 10 + kRowH * static_cast<double>(i), {legend[i]});
  return s + "</svg>\n";
}

// ---- run section -------------------------------------------------------------------------------

std::string diff_html(const std::string& diff) {
  std::string s = "<pre class=\"diff\"><code>";
  size_t at = 0;
  while (at < diff.size()) {
    const size_t nl = std::min(diff.find('\n', at), diff.size());
    const std::string_view ln(diff.data() + at, nl - at);
    const char* cls = ln.starts_with("@@") ? "hunk" : ln.starts_with("+") ? "add" : ln.starts_with("-") ? "del" : "ctx";
    s += fmt::format(R"(<span class="{}">{}</span>)", cls, html_escape(ln));
    at = nl + 1;
  }
  return s + "</code></pre>\n";
}

/// Tuning-shape labels in order of appearance, for the steps table's columns.
std::vector<std::string> tuning_shapes(const json& steps) {
  std::vector<std::string> out;
  for (const json& st : steps)
    for (const json& sh : list(field(st, "verdict"), "shapes")) {
      const std::string l = shape_label(field(sh, "shape"));
      if (field(sh, "heldout") != true && out.size() < kMaxShapeColumns && std::find(out.begin(), out.end(), l) == out.end())
        out.push_back(l);
    }
  return out;
}

std::string median_td(const json& stats) {
  const auto med = number(stats, "median");
  if (!med) return num_td(std::string(kDash));
  std::string tip;
  if (const auto q1 = number(stats, "q1"), q3 = number(stats, "q3"); q1 && q3)
    tip = fmt::format("q1–q3 {}–{} ms", fmt_sig(q1), fmt_sig(q3));
  if (const auto n = number(stats, "n")) tip += fmt::format("{}n={}", tip.empty() ? "" : ", ", *n);
  return num_td(fmt_sig(med), tip);
}

std::string steps_table(const json& steps, const std::string& prefix, std::optional<size_t> best) {
  const auto shapes = tuning_shapes(steps);
  std::vector<std::string> cols{"#seq", "role", "disposition", "#speedup"};
  for (const auto& l : shapes) cols.push_back("#ms " + l);
  cols.insert(cols.end(), {"#mean % of bound", "candidate", "detail"});
  std::string s = "<table class=\"steps\">\n" + header_row(cols);
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& st = steps[i];
    const json& v = field(st, "verdict");
    std::vector<const json*> by_shape(shapes.size(), nullptr);
    double bound_sum = 0;
    int bound_n = 0;
    for (const json& sh : list(v, "shapes")) {
      if (field(sh, "heldout") == true) continue;
      const auto it = std::find(shapes.begin(), shapes.end(), shape_label(field(sh, "shape")));
      if (it != shapes.end()) by_shape[static_cast<size_t>(it - shapes.begin())] = &field(sh, "time_ms");
      if (const auto p = number(sh, "percent_of_bound")) bound_sum += *p, ++bound_n;
    }
    const std::string hash = text(st, "candidate_hash");
    s += best == i ? "<tr class=\"best\">" : "<tr>";
    s += num_td(esc_or_dash(text(st, "seq"))) + "<td>" + esc_or_dash(text(st, "role")) + "</td><td>" + status_html(step_disposition(st)) +
         "</td>" + num_td(fmt_x(step_speedup(st)));
    for (const json* t : by_shape) s += t ? median_td(*t) : num_td(std::string(kDash));
    s += num_td(fmt_pct(bound_n ? std::optional(bound_sum / bound_n) : std::nullopt));
    s += hash.empty() ? "<td>" + std::string(kDash) + "</td>"
                      : fmt::format(R"(<td><a href="#{}s{}"><code>{}</code></a></td>)", prefix, i, html_escape(truncate(hash, kHashChars)));
    const std::string detail = text(st, "detail");
    s += fmt::format(R"(<td title="{}">{}</td></tr>)", html_escape(detail), esc_or_dash(truncate(detail, kDetailChars))) + "\n";
  }
  return s + "</table>\n";
}

std::string evidence_table(const json& verdict) {
  const json& shapes = list(verdict, "shapes");
  if (shapes.empty()) return "<p class=\"empty\">no per-shape evidence</p>\n";
  std::string s =
      "<table class=\"shapes\">\n" + header_row({"shape", "set", "status", "#max abs err", "#max rel err", "#median ms", "#baseline ms",
                                                 "#speedup", "#bound ms", "#% of bound", "#% of copy", "notes"});
  for (const json& sh : shapes) {
    std::string notes;
    if (const json& m = field(sh, "first_mismatch"); !m.is_null())
      notes = "first mismatch: " + truncate(m.is_string() ? text(m) : dump(m), kNoteChars);
    if (const std::string w = text(sh, "warning"); !w.empty()) notes += (notes.empty() ? "" : "; ") + truncate(w, kNoteChars);
    std::optional<double> speedup = positive(number(sh, "speedup"));
    if (const auto t = positive(number(field(sh, "time_ms"), "median")), b = number(field(sh, "baseline_ms"), "median"); !speedup && t && b)
      speedup = *b / *t;
    s += "<tr><td class=\"nowrap\">" + esc_or_dash(shape_label(field(sh, "shape"))) + "</td><td class=\"nowrap\">" +
         (field(sh, "heldout") == true ? "held-out" : "tuning") + "</td><td>" + status_html(text(sh, "status")) + "</td>" +
         num_td(fmt_err(number(sh, "max_abs_err"))) + num_td(fmt_err(number(sh, "max_rel_err"))) + median_td(field(sh, "time_ms")) +
         median_td(field(sh, "baseline_ms")) + num_td(fmt_x(speedup)) + num_td(fmt_sig(number(sh, "bound_ms"))) +
         num_td(fmt_pct(number(sh, "percent_of_bound"))) + num_td(fmt_pct(number(sh, "percent_of_copy_bandwidth"))) + "<td>" +
         esc_or_dash(notes) + "</td></tr>\n";
  }
  return s + "</table>\n";
}

struct Known {
  size_t index;
  std::string source;
};

std::string candidate_section(const json& st, size_t i, const std::string& prefix, const std::map<std::string, Known>& by_hash,
                              const json& steps) {
  const std::string hash = text(st, "candidate_hash"), path = text(st, "candidate_path"), source = text(st, "source");
  const json& v = field(st, "verdict");
  std::string s = fmt::format(R"(<details id="{}s{}"><summary>step {} · {} · {} · {})", prefix, i, esc_or_dash(text(st, "seq")),
                              esc_or_dash(text(st, "role")), status_html(step_disposition(st)), fmt_x(step_speedup(st)));
  if (!hash.empty()) s += " · <code>" + html_escape(truncate(hash, kHashChars)) + "</code>";
  if (!path.empty()) s += " · " + html_escape(path);
  s += "</summary>\n";
  if (const std::string d = text(st, "detail"); !d.empty())
    s += (step_disposition(st) == "passed" ? "<p>" : "<p class=\"error\">") + html_escape(d) + "</p>\n";
  if (v.is_object()) {
    std::vector<std::string> facts;
    for (const char* k : {"disposition", "baseline", "dsl", "target"})
      if (const std::string t = text(v, k); !t.empty()) facts.push_back(k + std::string(": ") + html_escape(t));
    if (const auto c = number(v, "speedup_vs_compile")) facts.push_back("vs torch.compile: " + fmt_x(c));
    std::string joined;
    for (const auto& f : facts) joined += (joined.empty() ? "" : " · ") + f;
    s += "<p class=\"meta\"><b>verdict</b> · " + joined + "</p>\n";
    if (const std::string d = text(v, "detail"); !d.empty() && d != text(st, "detail")) s += "<p>" + html_escape(d) + "</p>\n";
    s += evidence_table(v);
  }
  if (source.empty()) {
    s += "<p class=\"empty\">source not recorded</p>\n";
  } else {
    s += fmt::format("<details><summary>source ({} lines)</summary><pre><code>{}</code></pre></details>\n",
                     std::count(source.begin(), source.end(), '\n') + (source.ends_with('\n') ? 0 : 1), html_escape(source));
  }
  const std::string parent = text(st, "parent_hash");
  const auto it = by_hash.find(parent);
  if (!source.empty() && !parent.empty() && parent != hash && it != by_hash.end()) {
    const std::string diff = unified_diff(it->second.source, source);
    const std::string from = fmt::format("parent <code>{}</code> (step {})", html_escape(truncate(parent, kHashChars)),
                                         esc_or_dash(text(steps[it->second.index], "seq")));
    s += diff.empty() ? "<p class=\"mute\">identical to " + from + "</p>\n"
                      : "<details open><summary>diff from " + from + "</summary>\n" + diff_html(diff) + "</details>\n";
  }
  return s + "</details>\n";
}

std::string machine_text(const json& m) {
  std::string s = text(m, "device");
  if (const auto bw = positive(number(m, "copy_bandwidth_GBps"))) s += (s.empty() ? "" : ", ") + fmt::format("copy {} GB/s", fmt_sig(bw));
  if (const auto gf = positive(number(m, "peak_gflops_f32")))
    s += (s.empty() ? "" : ", ") + fmt::format("peak {} GFLOP/s f32", fmt_sig(gf));
  return s;
}

std::string meta_line(const std::vector<std::pair<std::string, std::string>>& facts) {
  std::string s;
  for (const auto& [k, v] : facts)
    if (!v.empty()) s += (s.empty() ? "" : " · ") + html_escape(k) + ": " + html_escape(v);
  return s.empty() ? s : "<p class=\"meta\">" + s + "</p>\n";
}

std::string run_meta(const json& run) {
  const std::string strategy = text(run, "strategy"), llm = text(run, "llm");
  return meta_line({{"run", text(run, "run")},
                    {"status", text(run, "status")},
                    {"strategy", strategy + (llm.empty() || llm == strategy ? "" : (strategy.empty() ? "" : " / ") + llm)},
                    {"created", text(run, "created_at")},
                    {"device", machine_text(field(run, "machine"))}});
}

/// Summary, trajectory, roofline, steps table and candidates under `h` headings; ids are prefixed so
/// that several runs share a page.
std::string run_body(const json& run, const std::string& prefix, std::string_view h) {
  const json& steps = list(run, "steps");
  std::optional<size_t> best;
  size_t passed = 0, failed = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string d = step_disposition(steps[i]);
    passed += d == "passed";
    failed += !d.empty() && d != "passed";
    const auto sp = step_speedup(steps[i]);
    if (d == "passed" && sp && (!best || *sp > *step_speedup(steps[*best]))) best = i;
  }
  // the headline is the run's result, the final check's verdict (every shape, held-out ones included, the
  // full protocol), where there is one; the search's best (tuning shapes, brief timing) beside it
  std::optional<size_t> final_pass;
  for (size_t i = 0; i < steps.size(); ++i)
    if (text(steps[i], "role") == "final" && step_disposition(steps[i]) == "passed") final_pass = i;
  std::string s = "<p class=\"summary\">";
  auto step_link = [&](size_t i) { return fmt::format(R"(<a href="#{}s{}">step {}</a>)", prefix, i, esc_or_dash(text(steps[i], "seq"))); };
  if (final_pass) {
    const json& f = steps[*final_pass];
    const auto sp = step_speedup(f);
    s += fmt::format("result <b>{}</b> (the final check, {})", fmt_x(sp), step_link(*final_pass));
    if (sp && *sp <= 1.0) s += " · <span class=\"fail\">not faster than the baseline: keep the baseline</span>";
    if (best && *best != *final_pass) s += fmt::format(" · search best {} at {}", fmt_x(step_speedup(steps[*best])), step_link(*best));
  } else if (best) {
    const json& b = steps[*best];
    const std::string where =
        text(b, "candidate_path").empty() ? truncate(text(b, "candidate_hash"), kHashChars) : text(b, "candidate_path");
    s += fmt::format(R"(best <b>{}</b> at {}{})", fmt_x(step_speedup(b)), step_link(*best),
                     where.empty() ? "" : " · <code>" + html_escape(where) + "</code>");
  } else {
    s += "no passing candidate";
  }
  s += fmt::format(" · {} steps: <span class=\"pass\">{} passed</span>, <span class=\"{}\">{} failed</span></p>\n", steps.size(), passed,
                   failed ? "fail" : "mute", failed);

  std::vector<RoofPoint> pts;
  roof_points(steps, "", "", pts);
  const auto heading = [&](std::string_view title) { return fmt::format("<{0}>{1}</{0}>\n", h, title); };
  s += heading("Trajectory") + trajectory_svg(steps);
  s += heading("Roofline") + roofline_svg(pts, find_peaks(field(run, "machine"), steps));
  s += heading("Steps") + (steps.empty() ? std::string("<p class=\"empty\">no steps recorded</p>\n") : steps_table(steps, prefix, best));

  std::map<std::string, Known> by_hash;
  for (size_t i = 0; i < steps.size(); ++i)
    if (const std::string hash = text(steps[i], "candidate_hash"), src = text(steps[i], "source"); !hash.empty() && !src.empty())
      by_hash.try_emplace(hash, Known{i, src});
  std::string cands;
  for (size_t i = 0; i < steps.size(); ++i)
    if (const json& st = steps[i]; !text(st, "candidate_hash").empty() || !text(st, "source").empty() || field(st, "verdict").is_object())
      cands += candidate_section(st, i, prefix, by_hash, steps);
  if (!cands.empty()) s += heading("Candidates") + cands;
  return s;
}

std::string page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
         html_escape(title) + "</title>\n<style>" + std::string(kCss) + "</style>\n</head>\n<body>\n" + body +
         "<footer>kfab report · self-contained, no scripts</footer>\n</body>\n</html>\n";
}

std::string error_page(const char* what) {
  return page("kfab report", "<h1>kfab report</h1>\n<p class=\"error\">could not render this report: " + html_escape(what) + "</p>\n");
}

// ---- bench -------------------------------------------------------------------------------------

std::string scores_panel(const json& sc) {
  std::string s = "<div class=\"scores\">\n";
  const auto tile = [&](const std::string& value, const std::string& key) {
    s += fmt::format(R"(<div class="score"><span class="v">{}</span><span class="k">{}</span></div>)", value, html_escape(key)) + "\n";
  };
  const auto scaled = [](std::optional<double> v) { return v ? std::optional(*v * 100) : std::nullopt; };
  const auto tasks = number(sc, "tasks"), correct = number(sc, "correct");
  tile(fmt_pct(scaled(number(sc, "correctness_rate"))),
       tasks && correct ? fmt::format("correct ({:g} of {:g})", *correct, *tasks) : std::string("correct"));
  std::vector<std::tuple<double, std::string, double>> fast;  // threshold, its key, the share of tasks
  if (const json& fp = field(sc, "fast_p"); fp.is_object())
    for (const auto& [k, v] : fp.items()) {
      char* end = nullptr;
      const double p = std::strtod(k.c_str(), &end);
      if (end != k.c_str() && number(v)) fast.emplace_back(p, k, *number(v));
    }
  std::sort(fast.begin(), fast.end());
  for (const auto& [p, k, share] : fast) tile(fmt_pct(share * 100), "fast_" + k);
  tile(fmt_x(number(sc, "geomean_speedup")), "geomean speedup");
  if (const auto c = number(sc, "geomean_speedup_vs_compile")) tile(fmt_x(c), "geomean vs torch.compile");
  const auto sol = number(sc, "sol_score");
  tile(sol ? fmt::format("{:.2f}", *sol) : std::string(kDash), "SOL score");
  tile(fmt_pct(number(sc, "mean_percent_of_bound")), "mean % of bound");
  tile(fmt_pct(scaled(number(sc, "heldout_retention"))), "held-out retention");
  return s + "</div>\n";
}

std::string speedups_svg(const json& tasks) {
  if (tasks.empty()) return "<p class=\"empty\">no tasks</p>\n";
  constexpr double kSlot = 44, kBar = 0.7, kMaxBar = 48, kNameChars = 24, kCharDrop = 4.2, kTaller = 40;
  const auto n = static_cast<double>(tasks.size());
  size_t longest = 0;
  for (const json& t : tasks) longest = std::max(longest, text(t, "task").size());
  const double bottom = kTop + kCharDrop * std::min<double>(kNameChars, static_cast<double>(longest));
  const Frame f{kLeft + std::max(kPlotW, n * kSlot) + kRight, kTop + kPlotH + kTaller + bottom, kLeft, kRight, kTop, bottom};
  double lo = 1.0, hi = 1.0;
  for (const json& t : tasks)
    if (const auto v = positive(number(t, "speedup"))) lo = std::min(lo, *v), hi = std::max(hi, *v);
  const Scale x = linear_scale(0, n, f.x0(), f.x1()), y = log_scale(lo, hi, f.y0(), f.y1());
  const double slot = (f.x1() - f.x0()) / n;
  std::string s = svg_open("speedups", f, "speedup per task");
  s += axes(x, y, "", "speedup (log)", false);
  for (size_t i = 0; i < tasks.size(); ++i) {
    const json& t = tasks[i];
    const std::string name = text(t, "task"), d = text(t, "disposition");
    const auto v = positive(number(t, "speedup"));
    const double cx = f.x0() + slot * (static_cast<double>(i) + 0.5);
    const std::string colour(d == "passed" ? kPass : kFail);
    s += fmt::format(R"(<a href="#task-{}">)", i);
    if (v) {
      const double top = std::min(y(*v), y(1.0)), h = std::max(1.0, std::fabs(y(*v) - y(1.0)));
      const double w = std::min(kMaxBar, slot * kBar);
      s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>)", px(cx - w / 2), px(top), px(w),
                       px(h), colour, html_escape(fmt::format("{}: {} {}", name, d.empty() ? "?" : d, fmt_x(v))));
      s += label(cx, *v >= 1.0 ? top - 3 : top + h + 11, "middle", fmt_x(v));
    } else {
      s += label(cx, y(1.0) - 4, "middle", "no result", "", kFail);
    }
    s += fmt::format(R"x(<text x="{0}" y="{1}" text-anchor="end" fill="{2}" transform="rotate(-40 {0} {1})">{3}</text>)x", px(cx),
                     px(f.y0() + 12), kInk, html_escape(truncate(name, static_cast<size_t>(kNameChars))));
    s += "</a>\n";
  }
  s += line(x.p0, y(1.0), x.p1, y(1.0), kInk, R"( stroke-dasharray="4 3")");
  s += label(x.p1 - 2, y(1.0) - 4, "end", "1.0x");
  return s + "</svg>\n";
}

std::string tasks_table(const json& tasks) {
  std::string s = "<table id=\"tasks\" class=\"tasks\">\n" + header_row({"task", "format", "disposition", "#speedup", "#vs compile",
                                                                         "#SOL score", "#% of bound", "#% of copy", "#held-out", "run"});
  for (size_t i = 0; i < tasks.size(); ++i) {
    const json& t = tasks[i];
    const json& ho = field(t, "heldout");
    const auto hp = number(ho, "passed"), ht = number(ho, "total");
    std::string held = hp && ht ? fmt::format("{:g}/{:g}", *hp, *ht) : std::string(kDash);
    if (field(t, "retained") == false || (hp && ht && *hp < *ht)) held = "<span class=\"fail\">" + held + "</span>";
    const auto sol = number(t, "sol_score");
    std::string disp = status_html(text(t, "disposition"));
    if (disp == kDash && !text(t, "error").empty()) disp = "<span class=\"fail\">error</span>";
    s += fmt::format(R"(<tr><td><a href="#task-{}">{}</a></td><td>{}</td><td>{}</td>)", i, esc_or_dash(text(t, "task")),
                     esc_or_dash(text(t, "format")), disp) +
         num_td(fmt_x(number(t, "speedup"))) + num_td(fmt_x(number(t, "speedup_vs_compile"))) +
         num_td(sol ? fmt::format("{:.2f}", *sol) : std::string(kDash)) + num_td(fmt_pct(number(t, "percent_of_bound"))) +
         num_td(fmt_pct(number(t, "percent_of_copy_bandwidth"))) + num_td(held) + "<td><code>" + esc_or_dash(text(t, "run")) +
         "</code></td></tr>\n";
  }
  return s + "</table>\n";
}

std::string task_section(const json& t, size_t i) {
  std::string s = fmt::format(R"(<details id="task-{}"><summary><b>{}</b> · {} · {}</summary>)", i, esc_or_dash(text(t, "task")),
                              status_html(text(t, "disposition")), fmt_x(number(t, "speedup"))) +
                  "\n";
  s += meta_line({{"path", text(t, "path")}, {"candidate", text(t, "candidate")}});
  if (const std::string e = text(t, "error"); !e.empty()) s += "<p class=\"error\">" + html_escape(e) + "</p>\n";
  if (const std::string d = text(t, "detail"); !d.empty()) s += "<p>" + html_escape(d) + "</p>\n";
  if (const json& r = field(t, "report"); r.is_object())
    s += run_meta(r) + run_body(r, fmt::format("t{}-", i), "h3");
  else if (text(t, "error").empty())
    s += "<p class=\"empty\">no run recorded</p>\n";
  return s + "</details>\n";
}

std::string bench_page(const json& bench) {
  const json& tasks = list(bench, "tasks");
  const std::string suite = text(bench, "suite"), target = text(bench, "target");
  std::string s = "<h1>" + esc_or_dash(suite) + (target.empty() ? "" : " · " + html_escape(target)) + "</h1>\n";
  json machine = field(bench, "machine");
  for (const json& t : tasks)
    if (!peaks_of(machine).gflops && !peaks_of(machine).gbps && field(field(t, "report"), "machine").is_object())
      machine = field(field(t, "report"), "machine");
  s += meta_line({{"mode", text(bench, "mode")},
                  {"bench", text(bench, "bench")},
                  {"started", text(bench, "started_at")},
                  {"wall", number(bench, "wall_s") ? fmt_seconds(number(bench, "wall_s")) : ""},
                  {"device", machine_text(machine)}});
  s += scores_panel(field(bench, "scores"));
  s += "<h2>Speedup per task</h2>\n" + speedups_svg(tasks);

  std::vector<RoofPoint> pts;
  std::vector<std::pair<std::string, std::string>> legend;
  Peaks peaks = peaks_of(machine);
  for (size_t i = 0; i < tasks.size(); ++i) {
    const std::string name = text(tasks[i], "task"), colour(kPalette[i % std::size(kPalette)]);
    const json& steps = list(field(tasks[i], "report"), "steps");
    const size_t before = pts.size();
    roof_points(steps, name, colour, pts);
    if (pts.size() > before) legend.emplace_back(truncate(name.empty() ? fmt::format("task {}", i + 1) : name, 26), colour);
    if (!peaks.gflops && !peaks.gbps) peaks = find_peaks(field(field(tasks[i], "report"), "machine"), steps);
  }
  s += "<h2>Roofline</h2>\n" + roofline_svg(pts, peaks, legend);
  s += "<h2>Tasks</h2>\n" + tasks_table(tasks);
  for (size_t i = 0; i < tasks.size(); ++i) s += task_section(tasks[i], i);
  return page("kfab bench " + (suite.empty() ? text(bench, "bench") : suite), s);
}

// ---- LCS diff ----------------------------------------------------------------------------------

enum class Op : char { Same = ' ', Del = '-', Add = '+' };
struct Edit {
  Op op;
  std::string_view line;
};

std::vector<std::string_view> split_lines(std::string_view s) {
  std::vector<std::string_view> out;
  while (!s.empty()) {
    const size_t nl = s.find('\n');
    out.push_back(s.substr(0, nl));
    if (nl == std::string_view::npos) break;
    s.remove_prefix(nl + 1);
  }
  return out;
}

std::vector<Edit> edit_script(const std::vector<std::string_view>& a, const std::vector<std::string_view>& b) {
  size_t pre = 0, suf = 0;
  while (pre < a.size() && pre < b.size() && a[pre] == b[pre]) ++pre;
  while (suf < a.size() - pre && suf < b.size() - pre && a[a.size() - 1 - suf] == b[b.size() - 1 - suf]) ++suf;
  const size_t n = a.size() - pre - suf, m = b.size() - pre - suf;
  std::vector<Edit> out;
  for (size_t i = 0; i < pre; ++i) out.push_back({Op::Same, a[i]});
  if (n * m > kDiffMaxCells) {
    for (size_t i = 0; i < n; ++i) out.push_back({Op::Del, a[pre + i]});
    for (size_t j = 0; j < m; ++j) out.push_back({Op::Add, b[pre + j]});
  } else {
    std::vector<uint32_t> lcs((n + 1) * (m + 1), 0);  // lcs[i][j]: of a[pre+i..] and b[pre+j..]
    const auto at = [&](size_t i, size_t j) -> uint32_t& { return lcs[i * (m + 1) + j]; };
    for (size_t i = n; i-- > 0;)
      for (size_t j = m; j-- > 0;) at(i, j) = a[pre + i] == b[pre + j] ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
    size_t i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[pre + i] == b[pre + j])
        out.push_back({Op::Same, a[pre + i++]}), ++j;
      else if (j == m || (i < n && at(i + 1, j) >= at(i, j + 1)))
        out.push_back({Op::Del, a[pre + i++]});
      else
        out.push_back({Op::Add, b[pre + j++]});
    }
  }
  for (size_t i = a.size() - suf; i < a.size(); ++i) out.push_back({Op::Same, a[i]});
  return out;
}

}  // namespace

std::string unified_diff(const std::string& before, const std::string& after) {
  if (before == after) return {};
  const auto a = split_lines(before), b = split_lines(after);
  const auto edits = edit_script(a, b);
  std::vector<size_t> old_at(edits.size() + 1, 0), new_at(edits.size() + 1, 0);  // lines consumed before each edit
  for (size_t k = 0; k < edits.size(); ++k) {
    old_at[k + 1] = old_at[k] + (edits[k].op != Op::Add);
    new_at[k + 1] = new_at[k] + (edits[k].op != Op::Del);
  }
  std::string out;
  size_t k = 0;
  while (true) {
    while (k < edits.size() && edits[k].op == Op::Same) ++k;
    if (k == edits.size()) break;
    const size_t start = k - std::min(k, kDiffContext);
    size_t last = k;
    for (size_t j = k; j < edits.size(); ++j) {
      if (edits[j].op != Op::Same)
        last = j;
      else if (j - last > 2 * kDiffContext)
        break;
    }
    const size_t end = std::min(edits.size(), last + 1 + kDiffContext);
    const size_t old_n = old_at[end] - old_at[start], new_n = new_at[end] - new_at[start];
    out += fmt::format("@@ -{},{} +{},{} @@\n", old_at[start] + (old_n > 0), old_n, new_at[start] + (new_n > 0), new_n);
    for (size_t e = start; e < end; ++e) {
      out += static_cast<char>(edits[e].op);
      out.append(edits[e].line);
      out += '\n';
    }
    k = end;
  }
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_run_html(const nlohmann::json& run) {
  try {
    const std::string task = text(run, "task"), target = text(run, "target");
    const std::string body = "<h1>" + esc_or_dash(task) + (target.empty() ? "" : " · " + html_escape(target)) + "</h1>\n" + run_meta(run) +
                             meta_line({{"task path", text(run, "task_path")}}) + run_body(run, "", "h2");
    return page("kfab run " + (task.empty() ? text(run, "run") : task), body);
  } catch (const std::exception& e) {
    return error_page(e.what());
  }
}

std::string render_bench_html(const nlohmann::json& bench) {
  try {
    return bench_page(bench);
  } catch (const std::exception& e) {
    return error_page(e.what());
  }
}

}  // namespace kfab
