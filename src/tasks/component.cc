#include "tasks/component.h"

#include <set>

#include "core/error.h"

namespace hfx::tasks {

void name_outputs(Component& c, ir::Builder& b, const std::vector<ir::ValueId>& values) {
  ir::Graph& g = c.graph;
  HFX_CHECK(values.size() == c.outputs.size(), "{}: {} values for {} outputs", c.role, values.size(), c.outputs.size());
  for (size_t i = 0; i < values.size(); ++i) {
    ir::ValueId v = values[i];
    if (g.value(v).producer < 0) v = b.add1("Identity", {v});
    g.rename(v, c.outputs[i].name);
    g.value(v).shape = c.outputs[i].shape;
    g.add_output(v);
  }
}

void keep_used_symbols(ir::Graph& g) {
  std::set<std::string> used;
  for (const auto& list : {g.inputs(), g.outputs()})
    for (auto id : list)
      for (const auto& d : g.value(id).shape)
        if (d.is_symbol()) used.insert(d.symbol);
  SymbolTable kept;
  for (const auto& [name, b] : g.symbols().all())
    if (used.count(name)) kept.set_bounds(name, b);
  for (const auto& r : g.symbols().relations())
    if (used.count(r.sum)) kept.relate_sum(r.sum, r.a, r.b);
  g.symbols() = kept;
}

}  // namespace hfx::tasks
