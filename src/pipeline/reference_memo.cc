#include "pipeline/reference_memo.h"

#include <cstring>

namespace hfx::pipeline {

namespace {

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

bool same(const ReferenceMemo::Tensors& a, const ReferenceMemo::Tensors& b) {
  if (a.size() != b.size()) return false;
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j)
    if (i->first != j->first || !same(i->second, j->second)) return false;
  return true;
}

}  // namespace

const ReferenceMemo::Tensors* ReferenceMemo::outputs(const std::string& role, const std::string& variant,
                                                     const Tensors& inputs) const {
  for (const auto& r : runs_)
    if (r.role == role && r.variant == variant && same(r.inputs, inputs)) return &r.outputs;
  return nullptr;
}

void ReferenceMemo::keep_outputs(const std::string& role, const std::string& variant, const Tensors& inputs,
                                 const Tensors& outputs) {
  runs_.push_back({role, variant, inputs, outputs});
}

std::optional<ReferenceMemo::Tokens> ReferenceMemo::greedy(const std::string& variant, const Tokens& prompts,
                                                           const Tokens& tokens) const {
  for (const auto& g : greedy_)
    if (g.variant == variant && g.prompts == prompts && g.tokens == tokens) return g.agreed;
  return std::nullopt;
}

void ReferenceMemo::keep_greedy(const std::string& variant, const Tokens& prompts, const Tokens& tokens,
                                const Tokens& agreed) {
  greedy_.push_back({variant, prompts, tokens, agreed});
}

}  // namespace hfx::pipeline
