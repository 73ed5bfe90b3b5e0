#include "tuner/program.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <set>

namespace kfab {

namespace {

const std::map<std::string, int> kArity = {
    {"neg", 1},     {"abs", 1},      {"exp", 1},   {"log", 1},       {"log1p", 1},     {"expm1", 1},   {"tanh", 1},
    {"sigmoid", 1}, {"relu", 1},     {"sqrt", 1},  {"rsqrt", 1},     {"erf", 1},       {"reciprocal", 1},
    {"sin", 1},     {"cos", 1},      {"gelu_erf", 1}, {"gelu_tanh", 1}, {"silu", 1},   {"floor", 1},   {"ceil", 1},
    {"sign", 1},    {"not", 1},      {"isnan", 1},      {"add", 2},   {"sub", 2},       {"mul", 2},       {"div", 2},     {"pow", 2},
    {"max", 2},     {"min", 2},      {"lt", 2},    {"le", 2},        {"gt", 2},        {"ge", 2},      {"eq", 2},
    {"ne", 2},      {"and", 2},      {"or", 2},    {"where", 3},     {"rowsum", 1},    {"rowmean", 1}, {"rowmax", 1},
    {"rowmin", 1},  {"allsum", 1},   {"allmean", 1}, {"pick", 2},  {"colsum", 1},    {"colmean", 1},
};

VClass join(VClass a, VClass b) {
  if ((a == VClass::C && b == VClass::R) || (a == VClass::R && b == VClass::C)) return VClass::E;
  return static_cast<int>(a) > static_cast<int>(b) ? a : b;
}

struct Parser {
  const std::string& s;
  size_t i = 0;
  Program& p;
  std::map<std::string, int>& names;
  const std::map<std::string, double>& constants;
  std::map<std::string, int> memo;  // common subexpressions
  std::string err;
  /// A row reduction may take a per-column value (the sum of a bias over a row): only programs that
  /// fold_row_sums builds, never a formula (whose author means a per-element value).
  bool column_rows = false;

  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  }
  bool eat(const char* t) {
    ws();
    const size_t n = std::char_traits<char>::length(t);
    if (s.compare(i, n, t) != 0) return false;
    // "<" must not eat the first half of "<="
    if (n == 1 && (t[0] == '<' || t[0] == '>' || t[0] == '=' || t[0] == '!') && i + 1 < s.size() && s[i + 1] == '=') return false;
    i += n;
    return true;
  }
  int fail(const std::string& m) {
    if (err.empty()) err = m;
    return -1;
  }

  int add(PNode n) {
    std::string key = n.op + ':' + std::to_string(n.input) + ':' + fmt::format("{:.17g}", n.value);
    for (int a : n.args) key += ',' + std::to_string(a);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    // class and the all-reduction dependency
    if (n.op == "in") {
      n.cls = p.inputs[n.input].cls;
    } else if (n.op == "colidx") {
      n.cls = VClass::C;  // the column's index in its row
    } else if (n.op == "rowidx") {
      n.cls = VClass::R;  // the row's index
    } else if (n.op == "const" || n.args.empty()) {
      n.cls = VClass::K;
    } else {
      for (int a : n.args) n.after_all = n.after_all || p.nodes[a].after_all;
      const auto& a0 = p.nodes[n.args[0]];
      if (is_row_reduction(n.op)) {
        if (a0.cls != VClass::E && !(column_rows && a0.cls == VClass::C))
          return fail(fmt::format("{} needs a per-element value, got a {}-class one", n.op, vclass_letter(a0.cls)));
        n.cls = VClass::R;
      } else if (is_all_reduction(n.op)) {
        if (a0.cls != VClass::E && a0.cls != VClass::R)
          return fail(fmt::format("{} needs a per-element or per-row value, got a {}-class one", n.op, vclass_letter(a0.cls)));
        n.cls = VClass::K;
        n.after_all = true;
      } else if (is_col_reduction(n.op)) {
        if (a0.cls != VClass::E) return fail(fmt::format("{} needs a per-element value, got a {}-class one", n.op, vclass_letter(a0.cls)));
        // its argument is computed in a pass over the columns before the rows: from inputs, columns
        // and earlier column reductions only
        std::vector<int> todo{n.args[0]};
        std::set<int> seen;
        while (!todo.empty()) {
          const int k = todo.back();
          todo.pop_back();
          if (!seen.insert(k).second) continue;
          const PNode& d = p.nodes[k];
          if (d.cls == VClass::R || d.after_all || is_row_reduction(d.op) || d.op == "pick")
            return fail(fmt::format("{} of a value that depends on a row's reduction or a per-row value (columns are reduced before the rows)", n.op));
          if (!is_col_reduction(d.op)) todo.insert(todo.end(), d.args.begin(), d.args.end());
        }
        n.cls = VClass::C;
      } else if (n.op == "pick") {
        const auto& a1 = p.nodes[n.args[1]];
        if (a0.cls != VClass::E || (a1.cls != VClass::R && a1.cls != VClass::K))
          return fail("pick(e, i) needs a per-element e and a per-row (or scalar) column index i");
        n.cls = VClass::R;
      } else {
        n.cls = VClass::K;
        for (int a : n.args) n.cls = join(n.cls, p.nodes[a].cls);
      }
      if (n.after_all && n.cls != VClass::K && !is_all_reduction(n.op))
        return fail("a per-element or per-row value cannot depend on allsum/allmean (that needs the whole grid first)");
    }
    p.nodes.push_back(n);
    const int id = static_cast<int>(p.nodes.size()) - 1;
    memo[key] = id;
    return id;
  }
  int op(const std::string& o, std::vector<int> args) {
    for (int a : args)
      if (a < 0) return -1;
    PNode n;
    n.op = o;
    n.args = std::move(args);
    return add(n);
  }
  int constant(double v) {
    PNode n;
    n.op = "const";
    n.value = v;
    return add(n);
  }

  int compare() {
    int a = sum();
    for (;;) {
      const char* o = eat("<=") ? "le" : eat(">=") ? "ge" : eat("==") ? "eq" : eat("!=") ? "ne" : eat("<") ? "lt" : eat(">") ? "gt" : nullptr;
      if (o == nullptr) return a;
      a = op(o, {a, sum()});
    }
  }
  int sum() {
    int a = product();
    for (;;) {
      if (eat("+")) a = op("add", {a, product()});
      else if (eat("-")) a = op("sub", {a, product()});
      else return a;
    }
  }
  int product() {
    int a = unary();
    for (;;) {
      if (eat("*")) a = op("mul", {a, unary()});
      else if (eat("/")) a = op("div", {a, unary()});
      else return a;
    }
  }
  int unary() {
    if (eat("-")) return op("neg", {unary()});
    return atom();
  }
  int atom() {
    ws();
    if (i >= s.size()) return fail("unexpected end of the expression");
    if (eat("(")) {
      const int a = compare();
      if (!eat(")")) return fail("')' expected");
      return a;
    }
    if (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.') {
      const char* b = s.c_str() + i;
      char* e = nullptr;
      const double v = std::strtod(b, &e);
      if (e == b) return fail("a number expected");
      i += static_cast<size_t>(e - b);
      return constant(v);
    }
    if (!std::isalpha(static_cast<unsigned char>(s[i])) && s[i] != '_') return fail(fmt::format("unexpected '{}'", s[i]));
    const size_t b = i;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
    const std::string id = s.substr(b, i - b);
    if (eat("(")) {
      std::vector<int> args;
      if (!eat(")")) {
        do args.push_back(compare());
        while (eat(","));
        if (!eat(")")) return fail("')' expected after the arguments of " + id);
      }
      if (id == "clamp" && args.size() == 3) return op("min", {op("max", {args[0], args[1]}), args[2]});
      const auto it = kArity.find(id);
      if (it == kArity.end()) return fail("unknown function " + id + "()");
      if (static_cast<int>(args.size()) != it->second)
        return fail(fmt::format("{}() takes {} argument(s), got {}", id, it->second, args.size()));
      return op(id, args);
    }
    if (id == "inf") return constant(HUGE_VAL);
    if (id == "nan") return constant(std::nan(""));
    if (id == "ncols" || id == "nrows") return op(id, {});  // the row length and count, at run time
    if (id == "colidx" || id == "rowidx") return op(id, {});  // a column's index in its row, a row's index
    if (auto it = names.find(id); it != names.end()) return it->second;
    if (auto it = constants.find(id); it != constants.end()) return constant(it->second);
    return fail("unknown name " + id);
  }
};

}  // namespace

char vclass_letter(VClass c) { return "KCRE"[static_cast<int>(c)]; }

namespace {

// Row reductions s (a sum or a mean) of f(a - m), m = first(a) a row reduction of the same a, with
// nothing per row between m and s and m no output: (m, s) pairs. `f` says whether s's argument node is
// f(d) of the difference node d (its index, or -1).
std::vector<std::pair<int, int>> paired_reductions(const Program& p, const char* first, const std::function<int(const PNode&)>& f) {
  std::vector<std::pair<int, int>> pairs;
  for (size_t s = 0; s < p.nodes.size(); ++s) {
    const PNode& sum = p.nodes[s];
    if (sum.op != "rowsum" && sum.op != "rowmean") continue;
    const int di = f(p.nodes[sum.args[0]]);
    if (di < 0 || p.nodes[di].op != "sub") continue;
    const PNode& d = p.nodes[di];
    const int m = d.args[1];
    if (p.nodes[m].op != first || p.nodes[m].args[0] != d.args[0]) continue;
    bool alone = true;  // nothing per row between them (every use of m in between is per element), m no output
    for (size_t k = static_cast<size_t>(m) + 1; k < s; ++k) alone = alone && p.nodes[k].cls != VClass::R && !is_all_reduction(p.nodes[k].op);
    for (const auto& o : p.outputs) alone = alone && o.second != m;
    if (alone) pairs.emplace_back(m, static_cast<int>(s));
  }
  return pairs;
}

}  // namespace

std::vector<std::pair<int, int>> softmax_pairs(const Program& p) {
  return paired_reductions(p, "rowmax", [](const PNode& n) { return n.op == "exp" ? n.args[0] : -1; });
}

int first_column_input(const Program& p) {
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const PNode& n = p.nodes[k];
    if (n.op == "in" && n.cls == VClass::C && !p.inputs[n.input].integer && !p.inputs[n.input].per_channel) return static_cast<int>(k);
  }
  return -1;
}

std::optional<SoftmaxReuse> softmax_exp_reuse(const Program& p) {
  for (const auto& [m, s] : softmax_pairs(p)) {
    const int x = p.nodes[m].args[0], e = p.nodes[s].args[0];
    if (p.nodes[x].op != "in" || p.nodes[x].cls != VClass::E) continue;
    // what the outputs and the reductions after the sum read per element: x must not be among it but
    // through e (a reduction's value is read, not its argument: the maximum m per element is)
    auto reduction = [&](int k) { return is_row_reduction(p.nodes[k].op) || is_all_reduction(p.nodes[k].op) || is_col_reduction(p.nodes[k].op); };
    std::vector<bool> seen(p.nodes.size());
    std::function<bool(int)> reaches_x = [&](int k) {
      if (k == x) return true;
      if (k == e || seen[k] || reduction(k)) return false;
      seen[k] = true;
      for (int a : p.nodes[k].args)
        if (reaches_x(a)) return true;
      return false;
    };
    bool alone = true;
    for (const auto& o : p.outputs) alone = alone && !reaches_x(o.second);
    for (size_t k = static_cast<size_t>(s) + 1; k < p.nodes.size(); ++k)
      if (reduction(static_cast<int>(k)))
        for (int a : p.nodes[k].args) alone = alone && !reaches_x(a);
    if (alone) return SoftmaxReuse{m, s, e, p.nodes[x].input};
  }
  return std::nullopt;
}

std::vector<std::pair<int, int>> moment_pairs(const Program& p) {
  return paired_reductions(p, "rowmean", [](const PNode& n) { return n.op == "mul" && n.args[0] == n.args[1] ? n.args[0] : -1; });
}

bool is_row_reduction(const std::string& op) { return op == "rowsum" || op == "rowmean" || op == "rowmax" || op == "rowmin"; }
bool is_all_reduction(const std::string& op) { return op == "allsum" || op == "allmean"; }
bool is_col_reduction(const std::string& op) { return op == "colsum" || op == "colmean"; }

bool Program::has(const char* op) const {
  for (const auto& n : nodes)
    if (n.op == op) return true;
  return false;
}

bool Program::needs_rows() const {
  // only what the outputs depend on counts (an unused per-row input does not)
  std::vector<bool> live(nodes.size());
  for (const auto& o : outputs) live[o.second] = true;
  for (size_t k = nodes.size(); k-- > 0;) {
    if (!live[k]) continue;
    const auto& n = nodes[k];
    if (is_row_reduction(n.op) || is_all_reduction(n.op) || is_col_reduction(n.op) || n.op == "pick" || n.cls == VClass::R) return true;
    for (int a : n.args) live[a] = true;
  }
  return false;
}

std::string Program::describe() const {
  std::string s;
  for (size_t k = 0; k < nodes.size(); ++k) {
    const auto& n = nodes[k];
    s += fmt::format("%{} {} {}", k, vclass_letter(n.cls), n.op);
    if (n.op == "in") s += " " + inputs[n.input].name;
    if (n.op == "const") s += fmt::format(" {:g}", n.value);
    for (int a : n.args) s += fmt::format(" %{}", a);
    s += '\n';
  }
  for (const auto& [name, id] : outputs) s += fmt::format("{} = %{}\n", name, id);
  return s;
}

Expected<Program> parse_program(const std::string& text, const std::vector<PInput>& inputs, const std::vector<std::string>& outputs,
                                const std::map<std::string, double>& constants) {
  Program p;
  p.inputs = inputs;
  std::map<std::string, int> names;
  Parser root{text, 0, p, names, constants, {}, {}, false};
  for (size_t k = 0; k < inputs.size(); ++k) {
    PNode n;
    n.op = "in";
    n.input = static_cast<int>(k);
    names[inputs[k].name] = root.add(n);
  }
  // statements
  size_t pos = 0;
  int line = 0;
  while (pos <= text.size()) {
    size_t end = text.find_first_of(";\n", pos);
    if (end == std::string::npos) end = text.size();
    std::string stmt = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (auto h = stmt.find('#'); h != std::string::npos) stmt.resize(h);
    if (stmt.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto eq = stmt.find('=');
    if (eq == std::string::npos || eq + 1 >= stmt.size() || stmt[eq + 1] == '=')
      return make_error(fmt::format("formula statement {} (\"{}\") is not `name = expression`", line, stmt));
    std::string name = stmt.substr(0, eq);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t\r") + 1);
    if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
      return make_error(fmt::format("formula statement {}: \"{}\" is not a name", line, name));
    const std::string rhs = stmt.substr(eq + 1);
    Parser ps{rhs, 0, p, names, constants, root.memo, {}, false};
    const int id = ps.compare();
    ps.ws();
    if (ps.err.empty() && ps.i != rhs.size()) ps.err = fmt::format("unexpected '{}'", rhs.substr(ps.i));
    if (!ps.err.empty() || id < 0) return make_error(fmt::format("formula statement {} (\"{}\"): {}", line, stmt, ps.err));
    root.memo = ps.memo;
    names[name] = id;
  }
  for (const auto& o : outputs) {
    auto it = names.find(o);
    if (it == names.end()) return make_error("the formula never assigns the output " + o);
    p.outputs.emplace_back(o, it->second);
  }
  // Dead nodes are harmless (the generator emits only what outputs need), but an output that is a
  // plain column value has no rows to come from.
  for (const auto& [o, id] : p.outputs)
    if (p.nodes[id].cls == VClass::C) return make_error("the output " + o + " is a per-column value; a row program cannot produce it");
  return p;
}

namespace {

/// An expression linear in the product: coef * acc + rest, rest a node of the folded program (-1: none).
struct Linear {
  double coef = 0.0;
  int rest = -1;
};

}  // namespace

std::optional<Program> fold_row_sums(const Program& src, int acc) {
  if (acc < 0 || acc >= static_cast<int>(src.inputs.size()) || src.groups > 1 || src.row_dims > 1) return std::nullopt;
  const size_t count = src.nodes.size();
  std::vector<bool> live(count);
  for (const auto& o : src.outputs) live[o.second] = true;
  for (size_t k = count; k-- > 0;)
    if (live[k])
      for (int a : src.nodes[k].args) live[a] = true;

  Program q;
  q.inputs = src.inputs;
  q.inputs[acc].cls = VClass::R;
  q.inputs[acc].name = src.inputs[acc].name + "_rowsum";
  const std::string none;
  std::map<std::string, int> names;
  const std::map<std::string, double> constants;
  Parser b{none, 0, q, names, constants, {}, {}, true};
  PNode in_acc;
  in_acc.op = "in";
  in_acc.input = acc;
  const int acc_rows = b.add(in_acc);

  std::vector<int> to(count, -1);                // the node in q of a node outside the linear region
  std::vector<std::optional<Linear>> lin(count);  // a node in the region: linear in acc
  auto term = [&](int a) { return lin[a] ? *lin[a] : Linear{0.0, to[a]}; };
  auto constant_of = [&](int a, double& v) {
    if (lin[a] || src.nodes[a].op != "const") return false;
    v = src.nodes[a].value;
    return true;
  };
  bool folded = false;
  for (size_t k = 0; k < count; ++k) {
    if (!live[k]) continue;
    const PNode& n = src.nodes[k];
    bool reads_region = n.op == "in" && n.input == acc;
    for (int a : n.args) reads_region = reads_region || lin[a].has_value();
    if (!reads_region) {
      if (n.op == "in" || n.op == "const") {
        to[k] = b.add(n);
        continue;
      }
      std::vector<int> args;
      for (int a : n.args) args.push_back(to[a]);
      PNode m = n;
      m.args = args;
      to[k] = b.add(m);
      continue;
    }
    double v = 0.0;
    if (n.op == "in") {
      lin[k] = Linear{1.0, -1};
    } else if (n.op == "add" || n.op == "sub") {
      const Linear x = term(n.args[0]), y = term(n.args[1]);
      const bool sub = n.op == "sub";
      int rest = x.rest;
      if (y.rest >= 0) rest = x.rest < 0 ? (sub ? b.op("neg", {y.rest}) : y.rest) : b.op(n.op, {x.rest, y.rest});
      lin[k] = Linear{sub ? x.coef - y.coef : x.coef + y.coef, rest};
    } else if (n.op == "neg") {
      const Linear x = term(n.args[0]);
      lin[k] = Linear{-x.coef, x.rest < 0 ? -1 : b.op("neg", {x.rest})};
    } else if (n.op == "mul" && (constant_of(n.args[0], v) || constant_of(n.args[1], v))) {
      const int other = lin[n.args[0]] ? n.args[1] : n.args[0];
      const Linear x = term(lin[n.args[0]] ? n.args[0] : n.args[1]);
      lin[k] = Linear{x.coef * v, x.rest < 0 ? -1 : b.op("mul", {x.rest, to[other]})};
    } else if (n.op == "div" && constant_of(n.args[1], v) && v != 0.0) {
      const Linear x = term(n.args[0]);
      lin[k] = Linear{x.coef / v, x.rest < 0 ? -1 : b.op("div", {x.rest, to[n.args[1]]})};
    } else if (n.op == "rowsum" || n.op == "rowmean") {
      // rowsum(coef * acc + rest) = coef * rowsum(acc) + rowsum(rest)
      const Linear x = term(n.args[0]);
      int sum = x.coef == 1.0 ? acc_rows : b.op("mul", {b.constant(x.coef), acc_rows});
      if (x.rest >= 0) sum = b.op("add", {sum, b.op("rowsum", {x.rest})});
      to[k] = n.op == "rowmean" ? b.op("div", {sum, b.op("ncols", {})}) : sum;
      folded = true;
    } else {
      return std::nullopt;  // the product is used otherwise than through a row sum of a linear function of it
    }
    if (!b.err.empty()) return std::nullopt;
  }
  if (!folded || !b.err.empty()) return std::nullopt;
  for (const auto& [name, id] : src.outputs) {
    if (lin[id] || to[id] < 0) return std::nullopt;  // an output is the product (or linear in it): it must be formed
    q.outputs.emplace_back(name, to[id]);
  }
  return q;
}

}  // namespace kfab
