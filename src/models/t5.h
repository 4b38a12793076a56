// T5 and mT5 (T5ForConditionalGeneration, MT5ForConditionalGeneration): see t5.cc.
#pragma once
#include <memory>

#include "io/checkpoint.h"
#include "models/seq2seq.h"

namespace hfx::models {

std::unique_ptr<Seq2SeqLm> make_t5(const io::Checkpoint& ckpt);
std::unique_ptr<Seq2SeqLm> make_mt5(const io::Checkpoint& ckpt);

// T5's relative position buckets, as Transformers' T5Attention._relative_position_bucket computes
// them for a distance of `distance` >= 0 positions in one direction: exact below num_buckets / 2,
// logarithmic up to max_distance (in f32, as torch rounds it), the last bucket beyond. `num_buckets`
// is the buckets of that direction (half the config's when bidirectional). Exposed for the unit test.
int64_t t5_distance_bucket(int64_t distance, int64_t num_buckets, int64_t max_distance);

}  // namespace hfx::models
