#include <algorithm>

#include "base/cuda/device_buffer.h"
#include "router/cuda/plan_dispatch.h"

namespace moe::cuda {

void plan_dispatch_from_host(const PlanShape& shape, const PlanInputs& host_in, const PlanOutputs& host_out,
                             cudaStream_t stream) {
  const size_t T = static_cast<size_t>(host_in.num_tokens);
  const size_t R = static_cast<size_t>(shape.num_ranked);
  const size_t P = T * shape.top_k;
  const size_t E = static_cast<size_t>(shape.num_experts);
  const size_t rows = static_cast<size_t>(std::max(host_in.num_state_rows, 0));

  DeviceBuffer<int32_t> experts(T * R), token_row(host_in.token_state_row ? T : 0), held(rows * E);
  DeviceBuffer<float> weights(T * R), top1(T);
  DeviceBuffer<TokenMeta> meta(T);
  DeviceBuffer<uint32_t> next(rows), prompt(host_in.state_prompt_length ? rows : 0);
  const size_t KE = static_cast<size_t>(shape.top_k) * E;  // rules::prompt_choice_counts_size
  DeviceBuffer<int32_t> first(host_in.state_higher_choices ? rows * KE : 0);
  const bool turns = rows > 0 && host_in.state_turn_offsets != nullptr;
  const size_t num_turn_ends = turns ? static_cast<size_t>(host_in.state_turn_offsets[rows]) : 0;
  DeviceBuffer<int32_t> turn_offsets(turns ? rows + 1 : 0);
  DeviceBuffer<uint32_t> turn_ends(num_turn_ends);
  if (turns) {
    turn_offsets.upload(host_in.state_turn_offsets, rows + 1);
    turn_ends.upload(host_in.state_turn_ends, num_turn_ends);
  }
  experts.upload(host_in.route_experts, T * R);
  weights.upload(host_in.route_weights, T * R);
  if (host_in.top1_score) top1.upload(host_in.top1_score, T);
  meta.upload(host_in.meta, T);
  if (host_in.token_state_row) token_row.upload(host_in.token_state_row, T);
  if (rows > 0) {
    held.upload(host_in.state_slots_held, rows * E);
    next.upload(host_in.state_next_position, rows);
    if (host_in.state_prompt_length) prompt.upload(host_in.state_prompt_length, rows);
    if (host_in.state_higher_choices) first.upload(host_in.state_higher_choices, rows * KE);
  }
  PlanInputs in = host_in;
  in.route_experts = experts.data();
  in.route_weights = weights.data();
  in.top1_score = host_in.top1_score ? top1.data() : nullptr;
  in.meta = meta.data();
  in.token_state_row = host_in.token_state_row ? token_row.data() : nullptr;
  in.state_slots_held = rows > 0 ? held.data() : nullptr;
  in.state_next_position = rows > 0 ? next.data() : nullptr;
  in.state_prompt_length = rows > 0 && host_in.state_prompt_length ? prompt.data() : nullptr;
  in.state_higher_choices = rows > 0 && host_in.state_higher_choices ? first.data() : nullptr;
  in.state_turn_offsets = turns ? turn_offsets.data() : nullptr;
  in.state_turn_ends = turns ? turn_ends.data() : nullptr;

  DeviceBuffer<int32_t> pair_expert(P), pair_slot(P), load(E), offsets(E + 1), slot_pairs(P);
  DeviceBuffer<float> pair_weight(P);
  DeviceBuffer<PairStatus> pair_status(P);
  DeviceBuffer<int64_t> capacity(E), counts(4);
  DeviceBuffer<PlanError> error(1);
  PlanOutputs out{pair_expert.data(), pair_slot.data(), pair_weight.data(), pair_status.data(), load.data(),
                  capacity.data(),    offsets.data(),   slot_pairs.data(),  counts.data(),      error.data()};

  PlanShape sized = shape;
  sized.max_tokens = std::max(shape.max_tokens, host_in.num_tokens);
  DeviceBuffer<std::byte> workspace(plan_workspace_bytes(sized));
  plan_dispatch(sized, in, out, workspace.data(), workspace.size(), stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));

  pair_expert.download(host_out.pair_expert, P);
  pair_slot.download(host_out.pair_slot, P);
  pair_weight.download(host_out.pair_weight, P);
  pair_status.download(host_out.pair_status, P);
  load.download(host_out.expert_load, E);
  capacity.download(host_out.expert_capacity, E);
  offsets.download(host_out.expert_offsets, E + 1);
  slot_pairs.download(host_out.slot_pairs, P);
  counts.download(host_out.counts, 4);
  error.download(host_out.error, 1);
  if (rows > 0) {
    held.download(host_in.state_slots_held, rows * E);
    next.download(host_in.state_next_position, rows);
    if (host_in.state_higher_choices) first.download(host_in.state_higher_choices, rows * KE);
  }
}

}  // namespace moe::cuda
