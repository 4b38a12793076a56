// GPT-2 (GPT2LMHeadModel) and GPT-BigCode (GPTBigCodeForCausalLM): their own network shape, built
// from the shared blocks (see gpt2.cc).
#pragma once

#include <memory>

#include "models/model.h"

namespace hfx::models {

std::unique_ptr<CausalLm> make_gpt2(const io::Checkpoint& ckpt);
std::unique_ptr<CausalLm> make_gpt_bigcode(const io::Checkpoint& ckpt);

}  // namespace hfx::models
