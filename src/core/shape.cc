#include "core/shape.h"

#include <fmt/format.h>

#include "core/error.h"

namespace hfx {

std::string Dim::str() const {
  if (is_fixed()) return std::to_string(value);
  if (is_symbol()) return symbol;
  return "?";
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + s[i].str();
  return out + "]";
}

Shape fixed_shape(const std::vector<int64_t>& dims) {
  Shape s;
  for (auto d : dims) s.push_back(Dim::fixed(d));
  return s;
}

std::optional<int64_t> fixed_numel(const Shape& s) {
  int64_t n = 1;
  for (const auto& d : s) {
    if (!d.is_fixed() || __builtin_mul_overflow(n, d.value, &n)) return std::nullopt;
  }
  return n;
}

std::string SymbolBounds::str() const {
  return fmt::format("[{}, {}{}", min ? std::to_string(*min) : "0", max ? std::to_string(*max) : "inf",
                     max ? "]" : ")");
}

void SymbolTable::declare(const std::string& name, SymbolBounds bounds) {
  if (!bounds_.count(name)) bounds_[name] = bounds;
}

void SymbolTable::set_bounds(const std::string& name, SymbolBounds bounds) { bounds_[name] = bounds; }

const SymbolBounds& SymbolTable::bounds(const std::string& name) const {
  auto it = bounds_.find(name);
  HFX_CHECK(it != bounds_.end(), "unknown symbol {}", name);
  return it->second;
}

void SymbolTable::relate_sum(const std::string& sum, const std::string& a, const std::string& b) {
  relations_.push_back({sum, a, b});
}

std::string SymbolTable::sum_of(const std::string& a, const std::string& b) const {
  for (const auto& r : relations_)
    if ((r.a == a && r.b == b) || (r.a == b && r.b == a)) return r.sum;
  return a + " + " + b;
}

bool SymbolTable::admits(const std::string& name, int64_t value) const {
  auto it = bounds_.find(name);
  if (it == bounds_.end()) return true;
  const auto& b = it->second;
  return !(b.min && value < *b.min) && !(b.max && value > *b.max);
}

void SymbolTable::check(const std::string& name, int64_t value, const std::string& where) const {
  if (!admits(name, value))
    bad_input("{}: dim `{}` = {} is outside the contract's bounds {}", where, name, value, bounds_.at(name).str());
}

}  // namespace hfx
