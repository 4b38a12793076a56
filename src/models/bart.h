// BART, mBART, Marian and Whisper (BartForConditionalGeneration, MBartForConditionalGeneration, MarianMTModel,
// WhisperForConditionalGeneration):
// see bart.cc.
#pragma once
#include <memory>

#include "io/checkpoint.h"
#include "models/seq2seq.h"

namespace hfx::models {

std::unique_ptr<Seq2SeqLm> make_bart(const io::Checkpoint& ckpt);
std::unique_ptr<Seq2SeqLm> make_mbart(const io::Checkpoint& ckpt);
std::unique_ptr<Seq2SeqLm> make_marian(const io::Checkpoint& ckpt);
std::unique_ptr<Seq2SeqLm> make_whisper(const io::Checkpoint& ckpt);

}  // namespace hfx::models
