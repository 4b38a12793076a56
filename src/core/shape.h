// Shapes whose dims are numbers or named symbols. Symbols carry the shape contract: their names
// (`batch_size`, `sequence_length`, ...) go into artifacts, and their bounds are checked at run time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hfx {

struct Dim {
  int64_t value = -1;  // >= 0 when the dim is a fixed number
  std::string symbol;  // non-empty when the dim is symbolic; empty + value<0 means unknown

  static Dim fixed(int64_t v) { return Dim{v, {}}; }
  static Dim sym(std::string name) { return Dim{-1, std::move(name)}; }
  static Dim unknown() { return Dim{}; }

  bool is_fixed() const { return value >= 0; }
  bool is_symbol() const { return !symbol.empty(); }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
  std::string str() const;  // "4", "batch_size" or "?"
};

using Shape = std::vector<Dim>;

std::string shape_str(const Shape& s);  // "[batch_size, 4, ?]"
Shape fixed_shape(const std::vector<int64_t>& dims);
// Number of elements when all dims are fixed (nullopt when one is not, or the product overflows).
std::optional<int64_t> fixed_numel(const Shape& s);

// Named dims with optional inclusive bounds and affine relations (sum = a + b).
struct SymbolBounds {
  std::optional<int64_t> min;
  std::optional<int64_t> max;
  std::string str() const;  // "[1, 8]", "[1, inf)"
};

class SymbolTable {
 public:
  void declare(const std::string& name, SymbolBounds bounds = {});
  void set_bounds(const std::string& name, SymbolBounds bounds);
  bool has(const std::string& name) const { return bounds_.count(name) > 0; }
  const SymbolBounds& bounds(const std::string& name) const;
  const std::map<std::string, SymbolBounds>& all() const { return bounds_; }

  // Declares `sum` = `a` + `b`, so shape inference names a Concat of the two.
  void relate_sum(const std::string& sum, const std::string& a, const std::string& b);
  // Name of a + b if declared (in either order), else an expression "a + b".
  std::string sum_of(const std::string& a, const std::string& b) const;
  struct Relation {
    std::string sum, a, b;
  };
  const std::vector<Relation>& relations() const { return relations_; }

  // Whether `value` lies within the symbol's bounds (an undeclared symbol admits any value).
  bool admits(const std::string& name, int64_t value) const;
  // Throws BadInput naming the dim, its value and its bounds when `value` is outside them.
  void check(const std::string& name, int64_t value, const std::string& where) const;

 private:
  std::map<std::string, SymbolBounds> bounds_;
  std::vector<Relation> relations_;
};

}  // namespace hfx
