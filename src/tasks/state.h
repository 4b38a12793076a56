// The contract's typed state, as tasks and the layers above spell it: the types live in ir/state.h
// (a model declares its StateSpecs, models sit below tasks), named here in hfx::tasks as before.
#pragma once

#include "ir/state.h"

namespace hfx::tasks {

using ir::conv_state;
using ir::kStateKinds;
using ir::KvCacheGeometry;
using ir::kv_cache_states;
using ir::state_dims;
using ir::state_kind_name;
using ir::state_shape;
using ir::state_update_name;
using ir::StateKind;
using ir::StateSpec;
using ir::StateUpdate;

}  // namespace hfx::tasks
