"""cakemoe: MoE kernels for LLM serving (Python layer over the C++ library).

StepFun fused MoE (spec ../shared/spec/stepfun.md, FlashInfer's ``cake_stepfun`` names)::

    w = cakemoe.prepare_weights(w1, w2, family="nvfp4", hidden_states_scale_global=a_gs)
    act = cakemoe.prepare_activations(hidden, family="nvfp4", hidden_states_scale_global=a_gs)
    layer = cakemoe.prepare_stepfun_moe(family="nvfp4", hidden_states=act.hidden_states,
                                        hidden_states_scale=act.hidden_states_scale,
                                        routing_logits=logits, num_experts=E, top_k=K,
                                        **w.tensors())
    layer.launch()            # no allocation, no host sync: CUDA-graph capturable
    (out,) = layer.outputs()  # bf16 [T, H]

or ``cakemoe.stepfun_moe(...)`` (one-shot), the per-stage ``routing / fc1 / requant / fc2 /
finalize``, and the unified ``MoEConfig`` entry (``cakemoe.config``). The same layer under
expert parallelism over NCCL, one process per GPU: ``cakemoe.stepfun_ep`` (``Communicator.
from_process_group`` over a torch.distributed group, then ``prepare_ep``).

BGMV MoE-LoRA (spec ../shared/spec/bgmv.md)::

    plan = cakemoe.prepare_bgmv_moe(x, [lora_a], [lora_b], sorted_token_ids, expert_ids,
                                    lora_indices, topk_weights, num_experts)
    y = plan.run()            # y_accum [T, S*F] float32, the same tensor object every call

Arrays travel through DLPack: torch tensors (CUDA: the GPU kernels on torch's current stream;
CPU: the reference engine) and numpy arrays (CPU reference engine; bf16 as ml_dtypes.bfloat16 or
uint16 bits). torch is never imported here unless the caller passes torch tensors;
``cakemoe.ops`` registers torch custom ops for both pipelines. Errors are the package's classes,
each naming the argument: ``InvalidArgument`` / ``Unsupported`` (ValueErrors),
``ArgumentTypeError`` (a TypeError and an InvalidArgument), ``CudaError`` (a RuntimeError).
"""

import warnings

from . import _arrays, _cakemoe
from ._cakemoe import ArgumentTypeError, CudaError, Error, InvalidArgument, Unsupported, with_cuda
from ._errors import ExperimentalWarning, UnsupportedPath
from . import config, stepfun, stepfun_ep
from .config import (
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
    prepare_moe,
    run_moe,
)
from .stepfun import (
    Plan,
    StepFunActivations,
    StepFunMoeLaunch,
    StepFunStageLaunch,
    StepFunWeights,
    default_plan,
    fc1,
    fc2,
    finalize,
    plans_for,
    prepare_activations,
    prepare_fc1,
    prepare_fc2,
    prepare_finalize,
    prepare_requant,
    prepare_routing,
    prepare_stepfun_moe,
    prepare_weights,
    requant,
    routing,
    stepfun_moe,
)
from .stepfun_ep import Communicator, EpLaunch, EpSizes, prepare_ep

__version__ = _cakemoe.__version__

__all__ = [
    "Activation",
    "ActivationType",
    "ArgumentTypeError",
    "BgmvPlan",
    "CakeStepFunConfig",
    "Communicator",
    "CudaError",
    "EpLaunch",
    "EpSizes",
    "Error",
    "ExecutionConfig",
    "ExperimentalWarning",
    "ExpertConfig",
    "InvalidArgument",
    "MoEConfig",
    "MoEFinalizeConfig",
    "Plan",
    "QuantConfig",
    "QuantFormat",
    "RoutingConfig",
    "RoutingInputMode",
    "RoutingMethodType",
    "StepFunActivations",
    "StepFunMoeLaunch",
    "StepFunStageLaunch",
    "StepFunWeights",
    "SwiGLUStep",
    "Unsupported",
    "UnsupportedPath",
    "__version__",
    "config",
    "default_plan",
    "fc1",
    "fc2",
    "finalize",
    "plans_for",
    "prepare_activations",
    "prepare_bgmv_moe",
    "prepare_ep",
    "prepare_fc1",
    "prepare_fc2",
    "prepare_finalize",
    "prepare_moe",
    "prepare_requant",
    "prepare_routing",
    "prepare_stepfun_moe",
    "prepare_weights",
    "requant",
    "routing",
    "run_moe",
    "set_warning_hook",
    "stepfun",
    "stepfun_ep",
    "stepfun_moe",
    "with_cuda",
]

_warning_hook = None


def set_warning_hook(hook):
    """Routes fallback warnings (one per distinct reason per process) to ``hook(message)``.

    ``None`` restores the default, ``warnings.warn(message, RuntimeWarning)``. Returns the
    previous hook.
    """
    global _warning_hook
    previous, _warning_hook = _warning_hook, hook
    return previous


def _on_fallback_warning(message):
    # Called by the C++ library from inside prepare_bgmv_moe.
    if _warning_hook is not None:
        _warning_hook(message)
    else:
        # stacklevel: this function <- _cakemoe.prepare_bgmv_moe (no frame) <- our
        # prepare_bgmv_moe <- the caller.
        warnings.warn(message, RuntimeWarning, stacklevel=3)


_is_torch = _arrays.is_torch
_signature = _arrays.signature


class BgmvPlan:
    """A prepared BGMV MoE-LoRA plan (spec bgmv §1, §8).

    ``run(stream=None)`` computes ``y_accum`` from scratch and returns it (the same object every
    call). The first run on a stream captures a CUDA graph; later runs replay it on that stream;
    inside an outer stream capture (e.g. ``torch.cuda.graph``) the kernels are enqueued directly.
    Every run checks that the bound tensors kept their storage, shape and strides.
    """

    def __init__(self, core, bound, y_accum, shrink_out, x):
        self._core = core
        self._bound = bound  # name -> array: keeps the memory alive and is re-checked per run
        self._signatures = {name: _signature(t) for name, t in bound.items()}
        self._y_accum = y_accum
        self._shrink_out = shrink_out
        self._x = x

    def _check_bindings(self):
        for name, t in self._bound.items():
            if _signature(t) != self._signatures[name]:
                raise RuntimeError(
                    f"{name}: tensor storage, shape or stride changed after preparation"
                )

    def _stream(self, stream):
        return _arrays.stream_handle(self._x, stream)

    def run(self, stream=None):
        """Enqueues the plan on ``stream`` (torch.cuda.Stream, an int handle, or None for
        torch's current stream / the default stream) and returns ``y_accum``."""
        self._check_bindings()
        handle = self._stream(stream)
        try:
            with _arrays.device_context(self._x):
                self._core.run(handle)
        except InvalidArgument as e:
            if e.argument == "stream":  # spec §8: a replay on another stream is a RuntimeError
                raise RuntimeError(str(e)) from e
            raise
        return self._y_accum

    def close(self):
        """Waits for pending replays and releases the captured graph; a later run recaptures."""
        self._core.close()

    @property
    def y_accum(self):
        return self._y_accum

    @property
    def shrink_out(self):
        return self._shrink_out

    @property
    def x(self):
        return self._x

    @property
    def route_index(self):
        """The Cake plan's int32 route-index workspace (None on other paths)."""
        return _arrays.to_framework(self._core.route_index, _arrays.framework(self._x))

    # Spec bgmv §1's plan attributes, read from the C++ plan.
    backend_used = property(lambda self: self._core.backend_used, doc='"cake" | "portable" | "cpu_reference"')
    variant = property(lambda self: self._core.variant, doc='"generic" | "specialized" | "portable"')
    shrink_launch = property(
        lambda self: self._core.shrink_launch,
        doc="(form, splits) or None; forms in spec §1 numbering: 0 / 2 rings, 3-6 register kinds",
    )
    grouped = property(lambda self: self._core.grouped)
    grouped_mma = property(
        lambda self: self._core.grouped_mma,
        doc="grouped expand on tensor cores: y within 1e-5 of the CPU engine, not bit for bit",
    )
    order_remap = property(lambda self: self._core.order_remap)
    pdl_mode = property(lambda self: self._core.pdl_mode, doc="0 plain, 1 early, 2 late (spec §4.4)")
    schedule_id = property(lambda self: self._core.schedule_id)
    fallback_reason = property(lambda self: self._core.fallback_reason)

    def __repr__(self):
        return (
            f"BgmvPlan(backend_used={self.backend_used!r}, variant={self.variant!r}, "
            f"grouped={self.grouped}, shrink_launch={self.shrink_launch}, "
            f"schedule_id={self.schedule_id})"
        )


def prepare_bgmv_moe(
    x,
    lora_a_weights,
    lora_b_weights,
    sorted_token_ids,
    expert_ids,
    lora_indices,
    topk_weights,
    num_experts,
    *,
    backend="cake",
    fallback=True,
    shrink_out=None,
    y_accum=None,
    grouped=None,
    order_remap=None,
):
    """Validates the inputs, picks the plan (Cake or portable) and allocates its workspaces.

    x [T, H] bf16/fp16; lora_a_weights / lora_b_weights: lists (one per slice) of [L, E, R, H]
    and [L, E, F, R]; sorted_token_ids, expert_ids [P] int64 (token ids outside [0, T) are
    padding); lora_indices [T] int64 (-1: no LoRA); topk_weights [P] float32. Optional
    shrink_out [S, P, R] (weight dtype) and y_accum [T, S*F] float32 (Cake: may be a column slice
    of a wider row-major buffer), both writable; when absent, cakemoe allocates them after the
    arguments are validated (cudaMalloc on CUDA, not torch's caching allocator; pass your own to
    use it) and returns them in x's framework. Bad input raises cakemoe.InvalidArgument (a
    ValueError) or cakemoe.ArgumentTypeError (a TypeError) naming the argument; inputs the Cake
    path cannot take fall back to the portable path with one RuntimeWarning per reason, or raise
    cakemoe.Unsupported (a ValueError) with fallback=False.

    Examples
    --------
    >>> plan = cakemoe.prepare_bgmv_moe(x, [a], [b], ids, experts, lora_idx, w, num_experts=8)
    >>> y = plan.run()
    """
    arrays = {
        "x": x,
        "sorted_token_ids": sorted_token_ids,
        "expert_ids": expert_ids,
        "lora_indices": lora_indices,
        "topk_weights": topk_weights,
        "shrink_out": shrink_out,
        "y_accum": y_accum,
    }
    kwargs = {name: _arrays.export(name, t) for name, t in arrays.items()}
    kwargs["lora_a_weights"] = _arrays.export_list("lora_a_weights", lora_a_weights)
    kwargs["lora_b_weights"] = _arrays.export_list("lora_b_weights", lora_b_weights)
    kwargs.update(num_experts=num_experts, backend=backend, fallback=fallback, grouped=grouped,
                  order_remap=order_remap)
    with _arrays.device_context(x):
        core = _cakemoe.prepare_bgmv_moe(kwargs)
    like = _arrays.framework(x)
    if y_accum is None:
        y_accum = _arrays.to_framework(core.y_accum, like)
    if shrink_out is None:
        shrink_out = _arrays.to_framework(core.shrink_out, like)
    bound = {name: t for name, t in arrays.items() if t is not None and name not in
             ("shrink_out", "y_accum")}
    for i, t in enumerate(lora_a_weights):
        bound[f"lora_a_weights[{i}]"] = t
    for i, t in enumerate(lora_b_weights):
        bound[f"lora_b_weights[{i}]"] = t
    for name, t in (("shrink_out", shrink_out), ("y_accum", y_accum)):
        if t is not None:
            bound[name] = t
    return BgmvPlan(core, bound, y_accum, shrink_out, x)
