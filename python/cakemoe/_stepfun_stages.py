"""The per-stage entries of ``cakemoe.stepfun`` (spec stepfun §9.1 / §9.2): ``prepare_<stage>``
binds one stage (routing, fc1, requant, fc2, finalize) to caller-owned buffers and ``<stage>``
runs it once; all ten are made from one template at import time."""

from . import _arrays, _cakemoe
from ._errors import warn_experimental
from ._launch import StepFunStageLaunch


def _prepare_stage(prepare_core, first_tensor, kwargs):
    exported = _arrays.layer_kwargs(kwargs)
    ref = kwargs.get(first_tensor)
    with _arrays.device_context(ref):
        core = prepare_core(exported)
    return StepFunStageLaunch(core, _arrays.arrays_of(kwargs), ref)


_STAGE_DOC = """Binds the {stage} stage to caller-owned buffers (spec stepfun §9.1 / §9.2).

    Keyword arguments (FlashInfer's names, shapes per spec §2, §5-7): {args}.
    Returns a ``StepFunStageLaunch``; ``{stage}(**kwargs)`` is ``prepare_{stage}(**kwargs)
    .launch()``. Every buffer is validated (dtype, shape, device, size bounds of spec §2.5)
    before anything is written; outputs must be writable.

    Examples
    --------
    >>> launch = cakemoe.stepfun.prepare_{stage}({example})
    >>> launch.launch()
    """

_STAGES = {
    "routing": (
        "routing_logits",
        "routing_logits [T, E] bf16|float32 xor topk_ids int32 [T, K]; topk_weights [T, K] "
        "(bf16, written from logits; bf16|float32 read with ids); topk_packed int32 [T, K]; "
        "expert_count_histogram int32 [>= max(2E, 512)]; total_num_padded_tokens int32 [1]; "
        "expanded_idx_to_permuted_idx int32 [T*K]; permuted_idx_to_token_idx int32 "
        "[>= max_padded]; cta_idx_xy_to_batch_idx, cta_idx_xy_to_mn_limit int32 [>= max_ctas]; "
        "num_non_exiting_ctas int32 [1]; num_tokens_per_expert int32 [E_loc] (optional); "
        "num_experts, top_k, local_expert_offset, local_num_experts, tile_tokens_dim (int); "
        "routed_scaling_factor (float); enable_pdl, poison_routing_tail (bool)",
        "routing_logits=logits, topk_weights=w, ..., num_experts=8, top_k=2",
    ),
    "fc1": (
        "hidden_states",
        "family; hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale, "
        "output1_scale_scalar, output1_scale_gate_scalar, gemm1_clamp_limit, per_token_scale "
        "(as stepfun_moe); the routing tables; gemm1_output [max_padded, I/2] uint8 | "
        "[max_padded, I] e4m3/bf16; gemm1_output_scale (nvfp4, mxfp8); top_k, tile_tokens_dim "
        "(int); enable_pdl, pad_routing_tail (bool; the router always writes the benign tail)",
        'family="bf16", hidden_states=x, gemm1_weights=w1, ..., top_k=2',
    ),
    "requant": (
        "gemm1_output",
        "gemm1_output bf16 [rows, I]; expanded_idx_to_permuted_idx int32 [T*K]; output uint8 "
        "[rows, I/2]; output_scale uint8 (e4m3 scale bytes in sf_layout); per_token_scale "
        'float32 [>= rows] (written); sf_layout "linear" | "r8c4" | "r128c4"; '
        "global_scale_inv (float); enable_pdl (bool)",
        "gemm1_output=g1, expanded_idx_to_permuted_idx=e2p, output=q, ...",
    ),
    "fc2": (
        "gemm2_input",
        "family; gemm2_input, gemm2_input_scale, gemm2_weights, gemm2_weights_scale, "
        "output2_scale_scalar, per_token_scale [>= max_padded]; cta_idx_xy_to_batch_idx, "
        "cta_idx_xy_to_mn_limit, num_non_exiting_ctas; gemm2_output bf16 [max_padded, H]; "
        "num_tokens, top_k, tile_tokens_dim (int); enable_pdl (bool)",
        'family="bf16", gemm2_input=g1, gemm2_weights=w2, ..., num_tokens=8, top_k=2',
    ),
    "finalize": (
        "gemm2_output",
        "gemm2_output bf16 [max_padded, H]; expert_weights [T, K] bf16|float32; "
        "expanded_idx_to_permuted_idx int32 [T*K]; total_num_padded_tokens int32 [1]; output "
        "bf16 [T, H]; num_experts (int); enable_pdl (bool)",
        "gemm2_output=g2, expert_weights=w, ..., output=out, num_experts=8",
    ),
}


def _make_stage(stage):
    first, args, example = _STAGES[stage]
    prepare_core = getattr(_cakemoe, f"prepare_{stage}")

    def prepare(**kwargs):
        warn_experimental()
        return _prepare_stage(prepare_core, first, kwargs)

    def one_shot(*, stream=None, **kwargs):
        warn_experimental()
        _prepare_stage(prepare_core, first, kwargs).launch(stream)

    prepare.__name__ = prepare.__qualname__ = f"prepare_{stage}"
    prepare.__doc__ = _STAGE_DOC.format(stage=stage, args=args, example=example)
    one_shot.__name__ = one_shot.__qualname__ = stage
    one_shot.__doc__ = (
        f"Runs the {stage} stage once: ``prepare_{stage}(**kwargs).launch(stream)``.\n\n"
        f"    See ``prepare_{stage}`` for the arguments.\n"
    )
    prepare.__module__ = one_shot.__module__ = "cakemoe.stepfun"  # the module that exports them
    return prepare, one_shot


prepare_routing, routing = _make_stage("routing")
prepare_fc1, fc1 = _make_stage("fc1")
prepare_requant, requant = _make_stage("requant")
prepare_fc2, fc2 = _make_stage("fc2")
prepare_finalize, finalize = _make_stage("finalize")
