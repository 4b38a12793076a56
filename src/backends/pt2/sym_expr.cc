#include "backends/pt2/sym_expr.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace hfx::pt2_backend {

std::string symbol_name(int index) { return fmt::format("s{}", index); }

SymExpr::SymExpr(int64_t constant) {
  if (constant != 0) terms_[{}] = constant;
}

SymExpr SymExpr::symbol(int index) {
  SymExpr e;
  e.terms_[{index}] = 1;
  return e;
}

bool SymExpr::is_const() const { return terms_.empty() || (terms_.size() == 1 && terms_.begin()->first.empty()); }

int64_t SymExpr::const_value() const {
  auto it = terms_.find({});
  return it == terms_.end() ? 0 : it->second;
}

std::optional<int> SymExpr::as_symbol() const {
  if (terms_.size() != 1) return std::nullopt;
  const auto& [mono, coef] = *terms_.begin();
  if (mono.size() != 1 || coef != 1) return std::nullopt;
  return mono[0];
}

void SymExpr::add_term(const std::vector<int>& mono, int64_t coef) {
  if (coef == 0) return;
  int64_t& c = terms_[mono];
  HFX_CHECK(!__builtin_add_overflow(c, coef, &c), "symbolic dim overflows int64");
  if (c == 0) terms_.erase(mono);
}

SymExpr SymExpr::operator+(const SymExpr& o) const {
  SymExpr r = *this;
  for (const auto& [m, c] : o.terms_) r.add_term(m, c);
  return r;
}

SymExpr SymExpr::operator-(const SymExpr& o) const {
  SymExpr r = *this;
  for (const auto& [m, c] : o.terms_) r.add_term(m, -c);
  return r;
}

SymExpr SymExpr::operator*(const SymExpr& o) const {
  SymExpr r;
  for (const auto& [m1, c1] : terms_)
    for (const auto& [m2, c2] : o.terms_) {
      std::vector<int> m = m1;
      m.insert(m.end(), m2.begin(), m2.end());
      std::sort(m.begin(), m.end());
      int64_t c = 0;
      HFX_CHECK(!__builtin_mul_overflow(c1, c2, &c), "symbolic dim overflows int64");
      r.add_term(m, c);
    }
  return r;
}

std::optional<SymExpr> SymExpr::divide_exact(const SymExpr& d) const {
  if (d.terms_.size() != 1) return std::nullopt;
  const auto& [dm, dc] = *d.terms_.begin();
  if (dc == 0) return std::nullopt;
  SymExpr r;
  for (const auto& [m, c] : terms_) {
    if (c % dc != 0) return std::nullopt;
    std::vector<int> rest = m;
    for (int s : dm) {
      auto it = std::find(rest.begin(), rest.end(), s);
      if (it == rest.end()) return std::nullopt;
      rest.erase(it);
    }
    r.add_term(rest, c / dc);
  }
  return r;
}

int64_t SymExpr::eval(const std::vector<int64_t>& values) const {
  int64_t total = 0;
  for (const auto& [m, c] : terms_) {
    int64_t v = c;
    for (int s : m) v *= values.at(size_t(s));
    total += v;
  }
  return total;
}

namespace {

std::string sympy_symbol(int s) { return fmt::format("Symbol('{}', positive=True, integer=True)", symbol_name(s)); }

std::string sympy_term(const std::vector<int>& mono, int64_t coef) {
  if (mono.empty()) return fmt::format("Integer({})", coef);
  std::vector<std::string> factors;
  if (coef != 1) factors.push_back(fmt::format("Integer({})", coef));
  for (int s : mono) factors.push_back(sympy_symbol(s));
  return factors.size() == 1 ? factors[0] : fmt::format("Mul({})", fmt::join(factors, ", "));
}

}  // namespace

std::string SymExpr::sympy() const {
  if (terms_.empty()) return "Integer(0)";
  std::vector<std::string> parts;
  // Symbols first, the constant last, as sympy prints an Add.
  for (auto it = terms_.rbegin(); it != terms_.rend(); ++it) parts.push_back(sympy_term(it->first, it->second));
  return parts.size() == 1 ? parts[0] : fmt::format("Add({})", fmt::join(parts, ", "));
}

std::string SymExpr::str() const {
  if (terms_.empty()) return "0";
  std::string out;
  for (auto it = terms_.rbegin(); it != terms_.rend(); ++it) {
    const auto& [m, c] = *it;
    std::vector<std::string> f;
    for (int s : m) f.push_back(symbol_name(s));
    const int64_t a = c < 0 ? -c : c;
    std::string term = m.empty() ? std::to_string(a) : (a == 1 ? "" : std::to_string(a) + "*") + fmt::format("{}", fmt::join(f, "*"));
    if (out.empty()) out = c < 0 ? "-" + term : term;
    else out += (c < 0 ? " - " : " + ") + term;
  }
  return out;
}

}  // namespace hfx::pt2_backend
