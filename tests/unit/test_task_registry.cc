// The one model registry (models/registry.h) and the task registry (tasks/task.h): every row's
// default task exists and needs only the modules the row's factory returns, the roles the recipe and
// the manifest accept are the tasks', and the unknown model_type error lists every supported type.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "models/registry.h"
#include "tasks/task.h"

using namespace hfx;

namespace {

TEST(TaskRegistry, EveryModelTypeHasItsDefaultTaskAndTheModulesItNeeds) {
  for (const auto& e : models::model_registry()) {
    const tasks::Task* t = tasks::find_task(e.default_task);
    ASSERT_NE(t, nullptr) << e.model_type << ": default task " << e.default_task;
    for (models::ModuleKind need : t->needs())
      EXPECT_NE(std::find(e.modules.begin(), e.modules.end(), need), e.modules.end())
          << e.model_type << " lacks " << models::module_name(need) << " for " << t->name();
  }
  EXPECT_EQ(models::find_model("llama").default_task, "causal-lm");
  EXPECT_EQ(models::find_model("bert").default_task, "feature-extraction");
  EXPECT_EQ(models::find_model("t5").default_task, "seq2seq-lm");
  EXPECT_EQ(models::find_model("bart").default_task, "seq2seq-lm");
  EXPECT_EQ(models::find_model_entry("fsmt"), nullptr);
}

TEST(TaskRegistry, TasksAreFoundByNameAndSayWhatTheyAre) {
  EXPECT_EQ(tasks::task_names(), "causal-lm, feature-extraction, seq2seq-lm");
  const tasks::Task* causal = tasks::find_task("causal-lm");
  const tasks::Task* features = tasks::find_task("feature-extraction");
  ASSERT_TRUE(causal && features);
  EXPECT_TRUE(causal->generative());
  EXPECT_FALSE(features->generative());
  EXPECT_EQ(causal->needs(), std::vector<models::ModuleKind>{models::ModuleKind::Decoder});
  EXPECT_EQ(features->needs(), std::vector<models::ModuleKind>{models::ModuleKind::Encoder});
  EXPECT_EQ(tasks::find_task("text-generation-with-past"), nullptr);
  const tasks::Task* seq2seq = tasks::find_task("seq2seq-lm");
  ASSERT_TRUE(seq2seq);
  EXPECT_EQ(seq2seq->needs(), std::vector<models::ModuleKind>{models::ModuleKind::Seq2Seq});
  EXPECT_EQ(seq2seq->roles(), (std::vector<std::string>{"encoder", "decoder", "decoder_with_past", "decoder_merged"}));
  // Each role once, in task order: an encoder-decoder's encoder and decoder are the roles' names already.
  EXPECT_EQ(tasks::known_roles(),
            (std::vector<std::string>{"decoder", "prefill", "decode", "encoder", "decoder_with_past", "decoder_merged"}));
  // BertModel's pooler, bare or under one base-model prefix, is left unused on purpose; nothing else.
  EXPECT_TRUE(features->ignores_weight("bert.pooler.dense.weight"));
  EXPECT_TRUE(features->ignores_weight("pooler.dense.bias"));
  EXPECT_FALSE(features->ignores_weight("a.bert.pooler.dense.weight"));
  EXPECT_FALSE(causal->ignores_weight("bert.pooler.dense.weight"));
}

TEST(TaskRegistry, AnUnknownModelTypeListsEverySupportedOne) {
  try {
    models::find_model("fsmt");
    FAIL() << "fsmt found";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    const std::string m = e.message();
    EXPECT_NE(m.find("model_type `fsmt` is not supported (supported: llama, "), std::string::npos) << m;
    EXPECT_NE(m.find(", gpt_neox, lfm2, mamba2, mamba, falcon_mamba, granitemoehybrid, bamba, nemotron_h, falcon_h1, jamba, zamba2, qwen3_5_text, qwen3_next, qwen3_5_moe_text, bert, roberta, xlm-roberta, distilbert, t5, mt5, bart, mbart, marian, whisper)"),
              std::string::npos)
        << m;
  }
}

}  // namespace
