// Integer polynomials over a program's size symbols (s0, s1, ...): how the `.pt2` writer carries a
// symbolic dim through shape computations and how torch.export writes one (a sympy `expr_str`).
// A dim of an LLM contract is a sum (total = past + sequence) or, after a flatten, a product
// (batch * sequence); polynomials hold both exactly, so a shape is never approximated.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hfx::pt2_backend {

class SymExpr {
 public:
  SymExpr(int64_t constant = 0);  // NOLINT: an int is a constant expression
  static SymExpr symbol(int index);

  bool is_const() const;
  int64_t const_value() const;  // the constant term (the value when is_const())
  // The symbol's index when this is exactly one symbol with coefficient 1.
  std::optional<int> as_symbol() const;

  SymExpr operator+(const SymExpr& o) const;
  SymExpr operator-(const SymExpr& o) const;
  SymExpr operator*(const SymExpr& o) const;
  // This divided by `d` when every term divides exactly (a constant, or a monomial present in every
  // term); nullopt otherwise.
  std::optional<SymExpr> divide_exact(const SymExpr& d) const;
  bool operator==(const SymExpr& o) const { return terms_ == o.terms_; }
  bool operator!=(const SymExpr& o) const { return !(*this == o); }

  // The value with each symbol i replaced by values[i].
  int64_t eval(const std::vector<int64_t>& values) const;
  // sympy's srepr, as torch.export writes it: "Add(Symbol('s0', positive=True, integer=True), Integer(1))".
  std::string sympy() const;
  // Human form for messages and cache keys: "s0 + 2*s1 - 1".
  std::string str() const;

  // (monomial, coefficient) pairs: a monomial is the sorted list of symbol indices it multiplies
  // (empty: the constant term).
  const std::map<std::vector<int>, int64_t>& terms() const { return terms_; }

 private:
  void add_term(const std::vector<int>& mono, int64_t coef);
  std::map<std::vector<int>, int64_t> terms_;
};

std::string symbol_name(int index);  // "s0"

}  // namespace hfx::pt2_backend
