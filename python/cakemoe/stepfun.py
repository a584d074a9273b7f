"""StepFun fused MoE from Python (spec stepfun §9): routing -> FC1 + SwiGLUStep -> (requant) ->
FC2 -> finalize, with FlashInfer's ``cake_stepfun`` names.

CUDA torch tensors run the GPU kernels on torch's current stream; CPU torch tensors and numpy
arrays run the CPU reference engine (bitwise the C++ results). Every entry validates all of its
arguments before anything is allocated or written; errors are ``cakemoe.InvalidArgument`` /
``cakemoe.Unsupported`` (ValueErrors) or ``cakemoe.ArgumentTypeError`` (a TypeError), each naming
the argument. The first use in a process emits one ``cakemoe.ExperimentalWarning``.

Example (numpy, CPU engine)::

    import numpy as np, cakemoe
    w = cakemoe.stepfun.prepare_weights(w1, w2, family="bf16", step_limits=7.0)
    act = cakemoe.stepfun.prepare_activations(hidden, family="bf16")
    (out,) = cakemoe.stepfun_moe(family="bf16", hidden_states=act.hidden_states,
                                 routing_logits=logits, num_experts=8, top_k=2, **w.tensors())
"""

from . import _arrays, _cakemoe
from ._cakemoe import ArgumentTypeError
from ._errors import invalid, make_error, warn_experimental
from ._launch import StepFunMoeLaunch, StepFunStageLaunch
from ._stepfun_prep import StepFunActivations, StepFunWeights, prepare_activations, prepare_weights
from ._stepfun_stages import (
    fc1,
    fc2,
    finalize,
    prepare_fc1,
    prepare_fc2,
    prepare_finalize,
    prepare_requant,
    prepare_routing,
    requant,
    routing,
)

Plan = _cakemoe.Plan

__all__ = [
    "Plan",
    "StepFunActivations",
    "StepFunMoeLaunch",
    "StepFunStageLaunch",
    "StepFunWeights",
    "autotune_cache_size",
    "clear_autotune_cache",
    "default_plan",
    "fc1",
    "fc2",
    "finalize",
    "max_ctas",
    "max_padded",
    "plans_for",
    "prepare_activations",
    "prepare_fc1",
    "prepare_fc2",
    "prepare_finalize",
    "prepare_requant",
    "prepare_routing",
    "prepare_stepfun_moe",
    "prepare_weights",
    "requant",
    "routing",
    "stepfun_moe",
]

_DEFAULT_GLOBAL_SCALE_INV = 1.0 / 2688.0  # 1 / (448 * 6), spec §6


def stepfun_moe(
    *,
    family,
    hidden_states,
    hidden_states_scale=None,
    gemm1_weights,
    gemm1_weights_scale=None,
    output1_scale_scalar=None,
    output1_scale_gate_scalar=None,
    gemm1_clamp_limit,
    per_token_scale=None,
    gemm2_weights,
    gemm2_weights_scale=None,
    output2_scale_scalar=None,
    routing_logits=None,
    topk_ids=None,
    topk_weights=None,
    num_experts,
    top_k,
    local_expert_offset=0,
    local_num_experts=None,
    plan=None,
    output=None,
    do_finalize=True,
    enable_pdl=True,
    reserved_sms=8,
    global_scale_inv=_DEFAULT_GLOBAL_SCALE_INV,
    routed_scaling_factor=1.0,
    poison_routing_tail=False,
    autotune=False,
    autotune_reps=3,
    stream=None,
    **unknown,
):
    """Runs one StepFun MoE layer (one-shot: prepare, launch, return owning results).

    Parameters
    ----------
    family : str
        ``"nvfp4"``, ``"nvfp4_bf16tok"``, ``"bf16"``, ``"fp8"`` or ``"mxfp8"`` (spec §4.2).
    hidden_states : tensor [T, H] bf16 | e4m3 (fp8, mxfp8) | uint8 [T, H/2] packed e2m1 (nvfp4*)
        The family's input format (see ``prepare_activations``).
    hidden_states_scale : tensor, optional
        nvfp4*: e4m3 [T, H/16] linear block scales; mxfp8: ue8m0 (uint8) [T, H/32].
    gemm1_weights, gemm1_weights_scale, gemm2_weights, gemm2_weights_scale : tensor
        The family's physical weight views (``prepare_weights``).
    output1_scale_scalar, output1_scale_gate_scalar, output2_scale_scalar : tensor, optional
        float32 [E_loc] per-expert scales (nvfp4*, fp8).
    gemm1_clamp_limit : tensor float32 [E_loc]
        SwiGLUStep limits in the family's units (spec §3.2).
    per_token_scale : tensor float32 [T], optional
        nvfp4_bf16tok: per-token decode scales of ``hidden_states``.
    routing_logits : tensor [T, E] bf16 | float32, optional
        FromLogits routing (Renormalize: top-K, softmax over the K); xor ``topk_ids``.
    topk_ids : tensor int32 [T, K], optional
        UnpackedPrecomputed routing: global expert ids, distinct per token.
    topk_weights : tensor [T, K] bf16 | float32, optional
        With ``topk_ids``: the router weights (read only).
    num_experts, top_k : int
        E (global) and K.
    local_expert_offset, local_num_experts : int
        The local experts [off, off + E_loc); default all E.
    plan : cakemoe.Plan, optional
        ``default_plan`` when absent (or the autotuned plan); a given plan wins over ``autotune``.
    output : tensor bf16 [T, H], optional
        Written when given (``do_finalize`` only); else allocated after validation.
    do_finalize : bool
        False returns ``[gemm2_output, expert_weights, expanded_idx_to_permuted_idx]`` (spec §7.3).
    enable_pdl, reserved_sms, global_scale_inv, routed_scaling_factor, poison_routing_tail
        As spec §9.1; ``routed_scaling_factor`` multiplies FromLogits weights.
    autotune : bool
        Opt-in, only without ``plan``: times ``autotune_reps`` launches (after one warm-up) of
        every ``plans_for`` candidate on these arguments and keeps the fastest; the choice is
        cached per (device, family, T rounded up to a power of two, K, E_loc, H, I, routing mode)
        for the process, and a cache hit measures nothing. A miss runs and synchronises kernels
        (on ``stream``): never with a CUDA graph capture running. ``autotune_cache_size()`` /
        ``clear_autotune_cache()`` inspect and clear the cache.
    autotune_reps : int
        Timed launches per candidate, 1..1000.
    stream : torch.cuda.Stream or int, optional
        Default: torch's current stream (CUDA tensors); autotune measures on it too.

    Returns
    -------
    list of tensors
        ``[output bf16 [T, H]]`` or the three ``do_finalize=False`` tensors, in the framework of
        ``hidden_states`` (numpy: bf16 as uint16 bits).

    Examples
    --------
    >>> (out,) = cakemoe.stepfun_moe(family="bf16", hidden_states=x, routing_logits=logits,
    ...                              num_experts=8, top_k=2, **weights.tensors())
    """
    warn_experimental()
    args = dict(locals())
    del args["stream"], args["unknown"]
    for name in unknown:
        raise make_error(ArgumentTypeError, name, "is not an argument of stepfun_moe()")
    kwargs = _arrays.layer_kwargs(args)
    with _arrays.device_context(hidden_states):
        refs = _cakemoe.stepfun_moe(kwargs, _arrays.stream_handle(hidden_states, stream))
    like = _arrays.framework(hidden_states)
    return [_arrays.to_framework(ref, like) for ref in refs]


def prepare_stepfun_moe(**kwargs):
    """Validates the layer, picks the plan and allocates every intermediate once.

    Takes the keyword arguments of ``stepfun_moe`` and returns a ``StepFunMoeLaunch``:
    ``launch(stream=None)`` replays the layer with no allocation and no host sync (CUDA-graph
    capturable), ``outputs()`` returns its results. ``stream`` here is only where ``autotune``
    measures (default torch's current stream). The caller's arrays must stay at the same storage,
    shape and strides (contents may change between launches).

    Examples
    --------
    >>> layer = cakemoe.prepare_stepfun_moe(family="nvfp4", hidden_states=x, ..., top_k=8)
    >>> layer.launch()
    >>> (out,) = layer.outputs()
    """
    warn_experimental()
    kwargs = dict(kwargs)
    stream = kwargs.pop("stream", None)
    hidden_states = kwargs.get("hidden_states")
    exported = _arrays.layer_kwargs(kwargs)
    with _arrays.device_context(hidden_states):
        core = _cakemoe.prepare_stepfun_moe(exported, _arrays.stream_handle(hidden_states, stream))
    return StepFunMoeLaunch(core, _arrays.arrays_of(kwargs), hidden_states)


def autotune_cache_size():
    """Plans chosen by ``autotune=True`` so far in this process."""
    return _cakemoe.autotune_cache_size()


def clear_autotune_cache():
    """Forgets every autotuned choice: the next autotuned prepare of each shape measures again."""
    _cakemoe.clear_autotune_cache()


def _device_kwargs(device):
    text = str(device)
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise invalid("device", f'must be "cpu", "cuda" or "cuda:N", got {text!r}')
    return {"device": kind, "device_index": int(index or 0)}


def plans_for(*, family, num_tokens, top_k, local_num_experts, hidden_size, intermediate_size,
              logits_input=True, device="cpu"):
    """Candidate plans of a problem: the native tile window (spec §8) on the dense ladder 8..256.

    Parameters
    ----------
    family : str
    num_tokens, top_k, local_num_experts, hidden_size, intermediate_size : int
        T, K, E_loc, H, I.
    logits_input : bool
        FromLogits (True) or UnpackedPrecomputed routing.
    device : str or torch.device
        ``"cpu"`` (reference engine) or ``"cuda[:N]"``.

    Returns
    -------
    list of cakemoe.Plan

    Examples
    --------
    >>> [p.tile for p in cakemoe.plans_for(family="nvfp4", num_tokens=8, top_k=8,
    ...   local_num_experts=64, hidden_size=4096, intermediate_size=1536)]
    """
    warn_experimental()
    kwargs = dict(locals())
    kwargs.update(_device_kwargs(kwargs.pop("device")))
    return _cakemoe.plans_for(kwargs)


def default_plan(*, family, num_tokens, top_k, local_num_experts, hidden_size, intermediate_size,
                 logits_input=True, device="cpu"):
    """The smallest candidate of ``plans_for`` (the native rule, spec §8): the plan
    ``stepfun_moe`` uses when none is given. Same arguments as ``plans_for``.

    Examples
    --------
    >>> cakemoe.default_plan(family="bf16", num_tokens=8, top_k=2, local_num_experts=8,
    ...                      hidden_size=256, intermediate_size=128).tile
    """
    warn_experimental()
    kwargs = dict(locals())
    kwargs.update(_device_kwargs(kwargs.pop("device")))
    return _cakemoe.default_plan(kwargs)


def max_ctas(num_tokens, top_k, num_experts, tile_tokens_dim):
    """Rows of the CTA tables (spec §2.5): ``min(E, T*K) + max(0, T*K - E) // tile``."""
    return _cakemoe.max_ctas(dict(num_tokens=num_tokens, top_k=top_k, num_experts=num_experts,
                                  tile_tokens_dim=tile_tokens_dim))


def max_padded(num_tokens, top_k, num_experts, tile_tokens_dim):
    """Rows of the permuted buffers (spec §2.5): ``max_ctas * tile``."""
    return _cakemoe.max_padded(dict(num_tokens=num_tokens, top_k=top_k, num_experts=num_experts,
                                    tile_tokens_dim=tile_tokens_dim))
