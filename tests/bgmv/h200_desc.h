// The ProblemDesc of an H200 plan (sm_90a, 132 SMs) for the selector tests: 8 LoRAs x 128
// experts, P = T * top_k.
#pragma once

#include <cstdint>

#include "bgmv/plan.h"

namespace cakemoe {
namespace bgmv {

constexpr int kH200Sms = 132;

inline ProblemDesc h200_desc(int64_t tokens, int64_t top_k, int64_t hidden, int64_t rank) {
  ProblemDesc d;
  d.num_tokens = tokens;
  d.num_pairs = tokens * top_k;
  d.hidden = hidden;
  d.rank = rank;
  d.num_loras = 8;
  d.num_experts = 128;
  d.arch = Arch::kSm90a;
  d.num_sms = kH200Sms;
  return d;
}

}  // namespace bgmv
}  // namespace cakemoe
