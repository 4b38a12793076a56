#include "models/delta_rule.h"

#include <vector>

#include "core/error.h"

namespace hfx::models {

DeltaRuleOut gated_delta_rule(ir::Builder& b, ir::ValueId q, ir::ValueId k, ir::ValueId v, ir::ValueId g,
                              ir::ValueId beta, ir::ValueId initial, const DeltaRuleShape& sh) {
  HFX_CHECK(sh.heads > 0 && sh.key_dim > 0 && sh.value_dim > 0 && sh.chunk > 0 && sh.max_positions > 0,
            "a delta rule of {} heads x {} x {}, chunk {}, over {} positions", sh.heads, sh.key_dim, sh.value_dim,
            sh.chunk, sh.max_positions);
  std::vector<ir::ValueId> ins = {q, k, v, g, beta};
  if (initial != ir::kNone) ins.push_back(initial);
  auto outs = b.add("GatedDeltaRule", ins,
                    {{"heads", sh.heads}, {"key_dim", sh.key_dim}, {"value_dim", sh.value_dim}, {"chunk", sh.chunk},
                     {"max_positions", sh.max_positions}});
  return {outs[0], outs[1]};
}

}  // namespace hfx::models
