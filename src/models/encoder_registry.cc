#include "models/bert.h"
#include "models/encoder.h"

namespace hfx::models {

const std::vector<EncoderEntry>& encoder_registry() {
  static const std::vector<EncoderEntry> entries = {
      {"bert", "BertModel", "post-norm encoder; token_type_ids input; BertForSequenceClassification head (pooler + classifier)",
       make_bert},
      {"roberta", "RobertaModel",
       "BERT with position ids from padding_idx + cumsum(input_ids != pad); no token_type_ids input; "
       "RobertaForSequenceClassification head (dense + tanh + out_proj)",
       make_roberta},
      {"xlm-roberta", "XLMRobertaModel", "the RoBERTa network; XLMRobertaForSequenceClassification head", make_roberta},
      {"distilbert", "DistilBertModel",
       "word + position embeddings, q_lin/k_lin/v_lin/out_lin; DistilBertForSequenceClassification head "
       "(pre_classifier + relu + classifier)",
       make_distilbert},
  };
  return entries;
}

const EncoderEntry* find_encoder(const std::string& model_type) {
  for (const auto& e : encoder_registry())
    if (e.model_type == model_type) return &e;
  return nullptr;
}

}  // namespace hfx::models
