#include "models/seq2seq.h"

namespace hfx::models {

ir::ValueId kept_or_computed(ir::Builder& b, ir::ValueId kept, ir::ValueId computed) {
  ir::ValueId both = b.concat({kept, computed}, 2);
  return b.add1("Slice", {both, b.i64s({0}), b.shape_of(computed, 2, 3), b.i64s({2})});
}

}  // namespace hfx::models
