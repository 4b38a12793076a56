// GPT-NeoX (GPTNeoXForCausalLM): its own network shape, built from the shared blocks (see gpt_neox.cc).
#pragma once

#include <memory>

#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_gpt_neox(const io::Checkpoint& ckpt);

}  // namespace hfx::models
