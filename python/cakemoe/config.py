"""The unified MoE configuration (spec stepfun §9.3, §9.4), FlashInfer's names::

    config = cakemoe.MoEConfig(
        routing=cakemoe.RoutingConfig(num_experts=64, top_k=8),
        quant=cakemoe.QuantConfig.nvfp4(),
        experts=cakemoe.ExpertConfig(intermediate_size=1536),
        activation=cakemoe.SwiGLUStep(limit=7.0),
        backend=cakemoe.CakeStepFunConfig(backend="cake_stepfun"),
        routing_input=cakemoe.RoutingInputMode.FromLogits)
    weights = config.prepare_weights(w1, w2, hidden_states_scale_global=a_gs)
    act = config.prepare_activations(weights, hidden)
    (out,) = cakemoe.run_moe(config, weights, hidden_states=act.hidden_states,
                             hidden_states_scale=act.hidden_states_scale, routing_logits=logits)

Every option the backend does not implement is rejected with ``cakemoe.Unsupported`` naming the
field (``"routing.method"``, ``"quant"``, ``"activation"``, ...), never ignored.
``CAKEMOE_STEPFUN_FULL_PATH`` is read by ``run_moe`` / ``prepare_moe``: unset, ``auto`` or ``1``
run the full path; ``0`` raises ``cakemoe.UnsupportedPath`` (a NotImplementedError); anything
else raises ``cakemoe.InvalidArgument`` (a ValueError).
"""

from . import _arrays, _cakemoe
from ._errors import UnsupportedPath, make_error
from ._launch import StepFunMoeLaunch
from ._moe_config import (
    Activation,
    ActivationType,
    CakeStepFunConfig,
    ExecutionConfig,
    ExpertConfig,
    MoEConfig,
    MoEFinalizeConfig,
    QuantConfig,
    QuantFormat,
    RoutingConfig,
    RoutingInputMode,
    RoutingMethodType,
    SwiGLUStep,
    _flatten,
    _require_weights,
)
from ._cakemoe import Unsupported


def check_full_path_env():
    """Reads ``CAKEMOE_STEPFUN_FULL_PATH``: unset / auto / 1 pass, 0 raises UnsupportedPath (a
    NotImplementedError), anything else InvalidArgument (a ValueError)."""
    try:
        _cakemoe.check_full_path_env()
    except Unsupported as e:
        raise make_error(UnsupportedPath, e.argument, e.rule) from None


def _inputs(hidden_states, hidden_states_scale, per_token_scale, routing_logits, topk_ids,
            topk_weights, output):
    arrays = dict(hidden_states=hidden_states, hidden_states_scale=hidden_states_scale,
                  per_token_scale=per_token_scale, routing_logits=routing_logits,
                  topk_ids=topk_ids, topk_weights=topk_weights, output=output)
    exported = {k: _arrays.export(k, v) for k, v in arrays.items() if v is not None}
    return arrays, exported


def run_moe(config, weights, *, hidden_states, hidden_states_scale=None, per_token_scale=None,
            routing_logits=None, topk_ids=None, topk_weights=None, output=None, stream=None):
    """Runs the layer a ``MoEConfig`` describes (one-shot) on ``stream`` (default: torch's
    current stream for CUDA tensors).

    Parameters
    ----------
    config : MoEConfig
    weights : StepFunWeights
        From ``config.prepare_weights`` / ``CakeStepFunConfig.prepare_weights``.
    hidden_states, hidden_states_scale, per_token_scale : tensor
        The family's activations (``config.prepare_activations``), T rows.
    routing_logits : tensor [T, E] bf16 | float32
        ``RoutingInputMode.FromLogits``.
    topk_ids, topk_weights : tensor int32 [T, K], bf16 | float32 [T, K]
        ``RoutingInputMode.UnpackedPrecomputed``.
    output : tensor bf16 [T, H], optional
        Written when given (``do_finalize``).

    Returns
    -------
    list of tensors
        ``[output]`` or, with ``finalize.do_finalize=False``, ``[gemm2_output, expert_weights,
        expanded_idx_to_permuted_idx]``.

    Examples
    --------
    >>> (out,) = cakemoe.run_moe(config, weights, hidden_states=act.hidden_states,
    ...                          hidden_states_scale=act.hidden_states_scale, routing_logits=z)
    """
    check_full_path_env()
    _require_weights(weights)
    _, exported = _inputs(hidden_states, hidden_states_scale, per_token_scale, routing_logits,
                          topk_ids, topk_weights, output)
    handle = _arrays.stream_handle(hidden_states, stream)
    with _arrays.device_context(hidden_states):
        refs = _cakemoe.run_moe(_flatten(config), weights._binding_dict(), exported, handle)
    like = _arrays.framework(hidden_states)
    return [_arrays.to_framework(ref, like) for ref in refs]


def prepare_moe(config, weights, *, hidden_states, hidden_states_scale=None,
                per_token_scale=None, routing_logits=None, topk_ids=None, topk_weights=None,
                output=None):
    """The prepared layer of a ``MoEConfig`` (``StepFunMoeLaunch``; arguments as ``run_moe``):
    ``launch()`` allocates nothing, never syncs the host and can be captured in a CUDA graph.

    Examples
    --------
    >>> layer = cakemoe.prepare_moe(config, w, hidden_states=act.hidden_states, routing_logits=z)
    >>> layer.launch()
    >>> (out,) = layer.outputs()
    """
    check_full_path_env()
    _require_weights(weights)
    arrays, exported = _inputs(hidden_states, hidden_states_scale, per_token_scale,
                               routing_logits, topk_ids, topk_weights, output)
    with _arrays.device_context(hidden_states):
        core = _cakemoe.prepare_moe(_flatten(config), weights._binding_dict(), exported)
    arrays.update(weights.tensors())
    return StepFunMoeLaunch(core, {k: v for k, v in arrays.items() if v is not None},
                            hidden_states)


__all__ = [
    "Activation",
    "ActivationType",
    "CakeStepFunConfig",
    "ExecutionConfig",
    "ExpertConfig",
    "MoEConfig",
    "MoEFinalizeConfig",
    "QuantConfig",
    "QuantFormat",
    "RoutingConfig",
    "RoutingInputMode",
    "RoutingMethodType",
    "SwiGLUStep",
    "check_full_path_env",
    "prepare_moe",
    "run_moe",
]
