// One more thread for the reference executor's split products, kept between products.
//
// A decode step of a model-sized check splits every weight block's product between the caller and
// a second thread (split_in_two). Starting a std::thread for each cost the Qwen3-0.6B export check
// 7,700 thread starts and joins; the kept thread takes a product's half in a few microseconds.
#pragma once

namespace hfx::runtime::detail {

// Runs other(other_ctx) on the kept thread while the caller runs own(own_ctx), and returns when both
// are done. Where the kept thread is already serving another caller, `other` runs on a thread of its
// own, as before. An exception from either is rethrown once both have finished (`own`'s first).
void run_beside(void (*other)(void*), void* other_ctx, void (*own)(void*), void* own_ctx);

// The same for two callables (lambdas), called by reference.
template <typename Other, typename Own>
void run_beside(Other& other, Own& own) {
  run_beside([](void* p) { (*static_cast<Other*>(p))(); }, &other, [](void* p) { (*static_cast<Own*>(p))(); }, &own);
}

}  // namespace hfx::runtime::detail
