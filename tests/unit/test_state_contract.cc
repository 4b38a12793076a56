// The contract's typed state (tasks/state.h) and the name sets clients load it by
// (tasks/state_names.h): the names real clients expect, the shapes a step reads and returns, and the
// read-back's view of a name that looks like state.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tasks/causal_lm.h"
#include "tasks/state.h"
#include "tasks/state_names.h"

using namespace hfx;
using namespace hfx::tasks;

namespace {

const StateNameSet& decoder() { return state_names(StateNames::Decoder); }

TEST(StateContract, KvCacheIsAKeyAndAValuePerLayer) {
  const auto states = kv_cache_states({3, 2, 16, false, 0});
  ASSERT_EQ(states.size(), 6u);
  for (size_t i = 0; i < states.size(); ++i) {
    EXPECT_EQ(states[i].layer, int64_t(i / 2));
    EXPECT_EQ(states[i].kind, i % 2 ? StateKind::SelfAttentionValue : StateKind::SelfAttentionKey);
    EXPECT_EQ(states[i].update, StateUpdate::Append);
    EXPECT_EQ(states[i].axis, 2);
    EXPECT_EQ(states[i].dtype, DType::F32);
  }
  EXPECT_EQ(shape_str(states[0].shape), "[batch_size, 2, past_sequence_length, 16]");
  EXPECT_EQ(shape_str(state_shape(states[0], Dim::sym("total_sequence_length"))), "[batch_size, 2, total_sequence_length, 16]");
  EXPECT_EQ(state_dims(states[0], 3, 5), (std::vector<int64_t>{3, 2, 5, 16}));

  const auto fixed = kv_cache_states({1, 4, 8, true, 32});
  EXPECT_EQ(fixed[0].update, StateUpdate::WriteAtPosition);
  EXPECT_EQ(shape_str(fixed[0].shape), "[batch_size, 4, 32, 8]");
  EXPECT_EQ(state_dims(fixed[1], 2, 32), (std::vector<int64_t>{2, 4, 32, 8}));
}

TEST(StateContract, ReplacedStateKeepsItsShape) {
  const StateSpec conv{0, StateKind::Convolution, DType::F32, {Dim::sym("batch_size"), Dim::fixed(64), Dim::fixed(3)},
                       StateUpdate::Replace, -1};
  EXPECT_EQ(state_shape(conv, Dim::sym("past_sequence_length")), conv.shape);
  EXPECT_EQ(state_dims(conv, 2, 99), (std::vector<int64_t>{2, 64, 3}));
}

// The names Optimum, transformers.js, onnxruntime-genai and OpenVINO GenAI load a decoder's cache by.
TEST(StateContract, DecoderNamesAreOptimums) {
  const auto ports = name_states(kv_cache_states({2, 2, 16, false, 0}), decoder());
  ASSERT_EQ(ports.size(), 4u);
  EXPECT_EQ(ports[0].past, "past_key_values.0.key");
  EXPECT_EQ(ports[0].present, "present.0.key");
  EXPECT_EQ(ports[3].past, "past_key_values.1.value");
  EXPECT_EQ(ports[3].present, "present.1.value");
  // genai_config.json's patterns, and OpenVINO's variable for the pair.
  EXPECT_EQ(genai_name_pattern(state_pattern(decoder(), StateKind::SelfAttentionKey).past), "past_key_values.%d.key");
  EXPECT_EQ(genai_name_pattern(state_pattern(decoder(), StateKind::SelfAttentionValue).present), "present.%d.value");
  EXPECT_EQ(openvino_variable_id(ports[0]), "past_key_values.0.keypresent.0.key");
  EXPECT_EQ(state_ports_glob(decoder()), "past_key_values.*/present.*");
  // A static cache's buffers are shared in place; a growing one's are not.
  EXPECT_TRUE(shared_buffers_of(ports).empty());
  const auto fixed = name_states(kv_cache_states({1, 2, 16, true, 8}), decoder());
  EXPECT_EQ(shared_buffers_of(fixed), (std::vector<std::pair<std::string, std::string>>{
                                          {"past_key_values.0.key", "present.0.key"},
                                          {"past_key_values.0.value", "present.0.value"}}));
}

// Declared for the next issues: encoder-decoders and SSM / hybrid models.
TEST(StateContract, NameSetsForTheNextModels) {
  auto port = [](StateNames set, StateKind kind, int64_t layer) {
    return name_states({{layer, kind, DType::F32, {Dim::sym("batch_size")}, StateUpdate::Replace, -1}}, state_names(set))[0];
  };
  EXPECT_EQ(port(StateNames::Seq2Seq, StateKind::CrossAttentionKey, 3).past, "past_key_values.3.encoder.key");
  EXPECT_EQ(port(StateNames::Seq2Seq, StateKind::CrossAttentionValue, 3).present, "present.3.encoder.value");
  EXPECT_EQ(port(StateNames::Seq2Seq, StateKind::SelfAttentionKey, 0).past, "past_key_values.0.decoder.key");
  EXPECT_EQ(port(StateNames::TransformersJsHybrid, StateKind::Convolution, 1).past, "past_conv.1");
  EXPECT_EQ(port(StateNames::TransformersJsHybrid, StateKind::Recurrent, 1).past, "past_ssm.1");
  EXPECT_EQ(port(StateNames::TransformersJsHybrid, StateKind::Recurrent, 1).present, "present_ssm.1");
  EXPECT_EQ(port(StateNames::GenaiHybrid, StateKind::Convolution, 2).past, "past_key_values.2.conv_state");
  EXPECT_EQ(port(StateNames::GenaiHybrid, StateKind::Recurrent, 2).present, "present.2.recurrent_state");
  EXPECT_EQ(port(StateNames::GenaiHybrid, StateKind::SelfAttentionKey, 0).past, "past_key_values.0.key");
  // A set without a name for a kind refuses it, naming both.
  try {
    port(StateNames::Decoder, StateKind::Convolution, 0);
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.message().find("convolution state"), std::string::npos) << e.message();
  }
}

TEST(StateContract, ReadBackTellsStateNames) {
  auto parsed = parse_state_name(decoder(), "present.12.value");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->kind, StateKind::SelfAttentionValue);
  EXPECT_EQ(parsed->layer, "12");
  EXPECT_FALSE(parsed->past);
  EXPECT_FALSE(parse_state_name(decoder(), "past_key_values.x.key"));
  EXPECT_FALSE(parse_state_name(decoder(), "input_ids"));
  EXPECT_TRUE(looks_like_state_name(decoder(), "past_key_values.x.key"));
  EXPECT_FALSE(looks_like_state_name(decoder(), "position_ids"));
  const auto ports = name_states(kv_cache_states({2, 2, 16, false, 0}), decoder());
  EXPECT_EQ(find_past(ports, "past_key_values.1.key"), &ports[2]);
  EXPECT_EQ(find_present(ports, "present.0.value"), &ports[1]);
  EXPECT_EQ(find_past(ports, "present.0.value"), nullptr);
}

// The causal-LM task turns the model's cache geometry into these ports: tested through the task's
// component in tests/oracle (test_contract.py); here, that the kinds and updates read as words.
TEST(StateContract, KindsAndUpdatesHaveNames) {
  for (StateKind k : kStateKinds) EXPECT_NE(state_kind_name(k), "?");
  EXPECT_EQ(state_update_name(StateUpdate::WriteAtPosition), "write at position");
}

}  // namespace
