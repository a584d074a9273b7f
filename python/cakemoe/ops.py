"""torch custom ops for both pipelines, with fake (meta) implementations, so that
``torch.compile(fullgraph=True)`` traces a model that calls them. Importing this module imports
torch and registers:

``torch.ops.cakemoe.stepfun_moe(family, hidden_states, hidden_states_scale, gemm1_weights,
gemm1_weights_scale, output1_scale_scalar, output1_scale_gate_scalar, gemm1_clamp_limit,
per_token_scale, gemm2_weights, gemm2_weights_scale, output2_scale_scalar, routing_logits,
topk_ids, topk_weights, num_experts, top_k, local_expert_offset=0, local_num_experts=-1,
tile_tokens_dim=0, do_finalize=True, enable_pdl=True, global_scale_inv=1/2688,
routed_scaling_factor=1.0) -> list[Tensor]``
    ``cakemoe.stepfun_moe`` (``local_num_experts=-1``: all; ``tile_tokens_dim=0``: the default
    plan, else the candidate plan of that tile). Returns ``[output]`` or the three
    ``do_finalize=False`` tensors.

``torch.ops.cakemoe.bgmv_moe(x, lora_a_weights, lora_b_weights, sorted_token_ids, expert_ids,
lora_indices, topk_weights, num_experts) -> Tensor``
    ``cakemoe.prepare_bgmv_moe(...).run()``: y_accum float32 [T, S*F].

Both are one-shots: each call validates, allocates (cakemoe's allocator) and runs. For serving,
prepare once (``prepare_stepfun_moe`` / ``prepare_bgmv_moe``) and launch or replay the plan.

Examples
--------
>>> import cakemoe.ops, torch
>>> @torch.compile(fullgraph=True)
... def layer(x, logits):
...     return torch.ops.cakemoe.stepfun_moe("bf16", x, None, w1, None, None, None, limits,
...                                         None, w2, None, None, logits, None, None, 8, 2)[0]
"""

from typing import List, Optional

import torch
from torch import Tensor

from . import stepfun as _stepfun

_GLOBAL_SCALE_INV = 1.0 / 2688.0


def _dims(family, hidden_states, gemm1_weights):
    """(T, H, I) from the activations and the physical W1 view (spec §4.2)."""
    t = hidden_states.shape[0]
    if family == "bf16":  # BlockMajorK [E, H/64, 2I, 64]
        return t, gemm1_weights.shape[1] * 64, gemm1_weights.shape[2] // 2
    packed = 2 if family in ("nvfp4", "nvfp4_bf16tok") else 1
    return t, gemm1_weights.shape[2] * packed, gemm1_weights.shape[1] // 2


def _plan(family, hidden_states, gemm1_weights, routing_logits, top_k, local_num_experts,
          tile_tokens_dim):
    t, h, i = _dims(family, hidden_states, gemm1_weights)
    device = hidden_states.device if hidden_states.device.type != "meta" else "cpu"
    problem = dict(family=family, num_tokens=int(t), top_k=top_k,
                   local_num_experts=int(gemm1_weights.shape[0]) if local_num_experts < 0 else
                   local_num_experts, hidden_size=int(h), intermediate_size=int(i),
                   logits_input=routing_logits is not None, device=device)
    if tile_tokens_dim == 0:
        return _stepfun.default_plan(**problem)
    for plan in _stepfun.plans_for(**problem):
        if plan.tile == tile_tokens_dim:
            return plan
    from ._errors import invalid

    raise invalid("tile_tokens_dim", f"{tile_tokens_dim} is not a candidate tile of the problem")


@torch.library.custom_op("cakemoe::stepfun_moe", mutates_args=())
def stepfun_moe(
    family: str,
    hidden_states: Tensor,
    hidden_states_scale: Optional[Tensor],
    gemm1_weights: Tensor,
    gemm1_weights_scale: Optional[Tensor],
    output1_scale_scalar: Optional[Tensor],
    output1_scale_gate_scalar: Optional[Tensor],
    gemm1_clamp_limit: Tensor,
    per_token_scale: Optional[Tensor],
    gemm2_weights: Tensor,
    gemm2_weights_scale: Optional[Tensor],
    output2_scale_scalar: Optional[Tensor],
    routing_logits: Optional[Tensor],
    topk_ids: Optional[Tensor],
    topk_weights: Optional[Tensor],
    num_experts: int,
    top_k: int,
    local_expert_offset: int = 0,
    local_num_experts: int = -1,
    tile_tokens_dim: int = 0,
    do_finalize: bool = True,
    enable_pdl: bool = True,
    global_scale_inv: float = _GLOBAL_SCALE_INV,
    routed_scaling_factor: float = 1.0,
) -> List[Tensor]:
    plan = None
    if tile_tokens_dim != 0:
        plan = _plan(family, hidden_states, gemm1_weights, routing_logits, top_k,
                     local_num_experts, tile_tokens_dim)
    return _stepfun.stepfun_moe(
        family=family, hidden_states=hidden_states, hidden_states_scale=hidden_states_scale,
        gemm1_weights=gemm1_weights, gemm1_weights_scale=gemm1_weights_scale,
        output1_scale_scalar=output1_scale_scalar,
        output1_scale_gate_scalar=output1_scale_gate_scalar, gemm1_clamp_limit=gemm1_clamp_limit,
        per_token_scale=per_token_scale, gemm2_weights=gemm2_weights,
        gemm2_weights_scale=gemm2_weights_scale, output2_scale_scalar=output2_scale_scalar,
        routing_logits=routing_logits, topk_ids=topk_ids, topk_weights=topk_weights,
        num_experts=num_experts, top_k=top_k, local_expert_offset=local_expert_offset,
        local_num_experts=None if local_num_experts < 0 else local_num_experts, plan=plan,
        do_finalize=do_finalize, enable_pdl=enable_pdl, global_scale_inv=global_scale_inv,
        routed_scaling_factor=routed_scaling_factor)


@stepfun_moe.register_fake
def _stepfun_moe_fake(family, hidden_states, hidden_states_scale, gemm1_weights,
                      gemm1_weights_scale, output1_scale_scalar, output1_scale_gate_scalar,
                      gemm1_clamp_limit, per_token_scale, gemm2_weights, gemm2_weights_scale,
                      output2_scale_scalar, routing_logits, topk_ids, topk_weights, num_experts,
                      top_k, local_expert_offset=0, local_num_experts=-1, tile_tokens_dim=0,
                      do_finalize=True, enable_pdl=True, global_scale_inv=_GLOBAL_SCALE_INV,
                      routed_scaling_factor=1.0):
    t, h, _ = _dims(family, hidden_states, gemm1_weights)
    if do_finalize:
        return [hidden_states.new_empty((t, h), dtype=torch.bfloat16)]
    # The buffers are sized with the global E (spec §2.5) at the plan's tile.
    tile = _plan(family, hidden_states, gemm1_weights, routing_logits, top_k, local_num_experts,
                 tile_tokens_dim).tile
    rows = _stepfun.max_padded(int(t), top_k, num_experts, tile)
    weights_dtype = torch.bfloat16 if routing_logits is not None else topk_weights.dtype
    return [
        hidden_states.new_empty((rows, h), dtype=torch.bfloat16),
        hidden_states.new_empty((t, top_k), dtype=weights_dtype),
        hidden_states.new_empty((t * top_k,), dtype=torch.int32),
    ]


@torch.library.custom_op("cakemoe::bgmv_moe", mutates_args=())
def bgmv_moe(
    x: Tensor,
    lora_a_weights: List[Tensor],
    lora_b_weights: List[Tensor],
    sorted_token_ids: Tensor,
    expert_ids: Tensor,
    lora_indices: Tensor,
    topk_weights: Tensor,
    num_experts: int,
) -> Tensor:
    from . import prepare_bgmv_moe

    plan = prepare_bgmv_moe(x, lora_a_weights, lora_b_weights, sorted_token_ids, expert_ids,
                            lora_indices, topk_weights, num_experts)
    return plan.run()  # y_accum keeps the plan (its memory owner) alive


@bgmv_moe.register_fake
def _bgmv_moe_fake(x, lora_a_weights, lora_b_weights, sorted_token_ids, expert_ids, lora_indices,
                   topk_weights, num_experts):
    width = sum(b.shape[2] for b in lora_b_weights)
    return x.new_empty((x.shape[0], width), dtype=torch.float32)
