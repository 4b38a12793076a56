// BERT and its family as encoders (see bert.cc): BertModel / BertForSequenceClassification,
// RobertaModel / RobertaForSequenceClassification (also XLM-RoBERTa), DistilBertModel /
// DistilBertForSequenceClassification.
#pragma once

#include <memory>

#include "models/encoder.h"

namespace hfx::models {

std::unique_ptr<Encoder> make_bert(const io::Checkpoint& ckpt);
std::unique_ptr<Encoder> make_roberta(const io::Checkpoint& ckpt);  // roberta and xlm-roberta
std::unique_ptr<Encoder> make_distilbert(const io::Checkpoint& ckpt);

}  // namespace hfx::models
