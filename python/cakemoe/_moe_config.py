"""The sections of the unified MoE configuration (spec stepfun §9.3, §9.4), ``MoEConfig`` and
``CakeStepFunConfig``, and their flattening into the binding's dict of dotted field names.
``cakemoe.config`` exports them and runs the layer they describe."""

import enum
from dataclasses import dataclass, field
from typing import Optional

from . import _arrays, _cakemoe
from ._errors import make_error, type_error, warn_experimental
from ._stepfun_prep import (
    StepFunWeights,
    _limits,
    activations_from_binding,
    prepare_activations,
    weights_from_binding,
)


class RoutingMethodType(enum.Enum):
    """Router kinds; only ``Renormalize`` (top-K, softmax over the K) is served."""

    Default = "Default"
    Renormalize = "Renormalize"
    DeepSeekV3 = "DeepSeekV3"
    Llama4 = "Llama4"
    RenormalizeNaive = "RenormalizeNaive"
    TopK = "TopK"


class QuantFormat(enum.Enum):
    BF16 = "BF16"
    FP8PerTensor = "FP8PerTensor"
    FP8BlockScale = "FP8BlockScale"
    MXFP8 = "MXFP8"
    MXFP4 = "MXFP4"
    NVFP4 = "NVFP4"


class ActivationType(enum.Enum):
    """Activations of the unified API; only ``SwiGLUStep`` is served (spec §3)."""

    SwiGLUStep = "SwiGLUStep"
    SwiGLU = "SwiGLU"
    SwiGLUBias = "SwiGLUBias"
    GeGLU = "GeGLU"
    ReLU2 = "ReLU2"
    Identity = "Identity"


class RoutingInputMode(enum.Enum):
    """FromLogits: routing_logits [T, E]; UnpackedPrecomputed: topk_ids + topk_weights [T, K];
    PackedPrecomputed: rejected."""

    FromLogits = "FromLogits"
    UnpackedPrecomputed = "UnpackedPrecomputed"
    PackedPrecomputed = "PackedPrecomputed"


@dataclass
class RoutingConfig:
    """The router of the layer.

    Parameters
    ----------
    num_experts, top_k : int
        E (global experts) and K.
    method : RoutingMethodType
        Only ``Renormalize`` is served.
    routed_scaling_factor : float, optional
        Multiplies the FromLogits weights; UnpackedPrecomputed needs None or 1.0.
    use_routing_bias, routing_bias, n_group, topk_group
        Rejected unless off / None / 0 or 1.

    Examples
    --------
    >>> cakemoe.RoutingConfig(num_experts=288, top_k=8)
    """

    num_experts: int
    top_k: int
    method: RoutingMethodType = RoutingMethodType.Renormalize
    use_routing_bias: bool = False
    routing_bias: object = None
    n_group: int = 0
    topk_group: int = 0
    routed_scaling_factor: Optional[float] = None


@dataclass
class QuantConfig:
    """The (weights, activations) pair: NVFP4xNVFP4 (``per_token_scale`` selects nvfp4_bf16tok),
    BF16xBF16, FP8PerTensorxFP8PerTensor or MXFP8xMXFP8.

    Examples
    --------
    >>> cakemoe.QuantConfig.nvfp4(per_token_scale=True).family
    'nvfp4_bf16tok'
    """

    weights: QuantFormat = QuantFormat.NVFP4
    activations: QuantFormat = QuantFormat.NVFP4
    per_token_scale: bool = False

    @classmethod
    def nvfp4(cls, per_token_scale=False):
        return cls(QuantFormat.NVFP4, QuantFormat.NVFP4, per_token_scale)

    @classmethod
    def bf16(cls):
        return cls(QuantFormat.BF16, QuantFormat.BF16)

    @classmethod
    def fp8_per_tensor(cls):
        return cls(QuantFormat.FP8PerTensor, QuantFormat.FP8PerTensor)

    @classmethod
    def mxfp8(cls):
        return cls(QuantFormat.MXFP8, QuantFormat.MXFP8)

    @property
    def family(self):
        """The StepFun family the pair selects ("nvfp4", ...); Unsupported for other pairs."""
        return _cakemoe.family_of(_flatten(self, "quant"))


@dataclass
class ExpertConfig:
    """The experts: ``intermediate_size`` I per expert (after TP), the local experts
    [local_expert_offset, local_expert_offset + local_num_experts) (None: all E). Fused shared
    experts are rejected.

    Examples
    --------
    >>> cakemoe.ExpertConfig(intermediate_size=1280, local_expert_offset=36, local_num_experts=36)
    """

    intermediate_size: int
    local_expert_offset: int = 0
    local_num_experts: Optional[int] = None
    num_fused_shared_experts: int = 0


@dataclass(frozen=True)
class Activation:
    """An activation of the unified API; use ``SwiGLUStep(limit)`` (the only one served)."""

    type: ActivationType
    limit: float = 7.0


class SwiGLUStep(Activation):
    """``min(silu(gate), L) * clamp(up, -L, L)`` with L = ``limit`` (spec §3).

    Examples
    --------
    >>> cakemoe.SwiGLUStep(limit=7.0).limit
    7.0
    """

    def __init__(self, limit=7.0):
        super().__init__(ActivationType.SwiGLUStep, limit)

    def __repr__(self):
        return f"SwiGLUStep(limit={self.limit!r})"


@dataclass
class ExecutionConfig:
    enable_pdl: bool = True
    tune_max_num_tokens: int = 8192  # validated (> 0); cakemoe has no autotuner yet


@dataclass
class MoEFinalizeConfig:
    do_finalize: bool = True


@dataclass
class CakeStepFunConfig:
    """Selects the experimental StepFun backend; ``backend`` must be ``"cake_stepfun"``.

    Constructing one emits ``cakemoe.ExperimentalWarning`` (once per process).

    Examples
    --------
    >>> cakemoe.CakeStepFunConfig(backend="cake_stepfun").supported(90)
    True
    """

    backend: str = "cake_stepfun"

    def __post_init__(self):
        warn_experimental(stacklevel=4)

    @staticmethod
    def supported(compute_capability):
        """Compute capabilities with compiled kernels: 90, 100 and 103 (cakemoe deviation 1)."""
        return _cakemoe.cake_stepfun_supported(compute_capability)

    @staticmethod
    def prepare_weights(w1, w2, *, quant, num_local_experts=None, hidden_size=None,
                        intermediate_size=None, activation=None, step_limits=None, device=None,
                        hidden_states_scale_global=None, intermediate_scale_global=None,
                        local_expert_offset=0):
        """The "cake_stepfun" weight view (spec §9.4) of logical bf16 w1 [E, 2I, H] (rows
        [up; gate]) and w2 [E, H, I].

        ``step_limits``: one limit per physical expert row (E_loc) or None (``activation.limit``
        for every expert). ``hidden_size`` / ``intermediate_size`` default to w1's and are
        checked against it. ``device`` moves torch weights first. fp8 and nvfp4 need
        ``hidden_states_scale_global``. Returns ``StepFunWeights``.

        Examples
        --------
        >>> w = cakemoe.CakeStepFunConfig.prepare_weights(w1, w2, quant=cakemoe.QuantConfig.bf16(),
        ...                                              activation=cakemoe.SwiGLUStep(7.0))
        """
        if device is not None:
            if not _arrays.is_torch(w1):
                raise make_error(_cakemoe.InvalidArgument, "device",
                                 "only torch weights can be moved; pass them on their device")
            w1, w2 = w1.to(device), w2.to(device)
        _arrays.export("w1", w1)  # type check first
        shape = tuple(int(n) for n in w1.shape)
        if len(shape) != 3:
            raise make_error(_cakemoe.InvalidArgument, "w1",
                             f"must be bf16 [E, 2I, H], got {shape}")
        if hidden_size is not None and shape[2] != hidden_size:
            raise make_error(_cakemoe.InvalidArgument, "hidden_size",
                             f"is {hidden_size} but w1 has H = {shape[2]}")
        config = MoEConfig(
            routing=RoutingConfig(num_experts=shape[0], top_k=1),
            quant=quant,
            experts=ExpertConfig(
                intermediate_size=shape[1] // 2 if intermediate_size is None else intermediate_size,
                local_expert_offset=local_expert_offset, local_num_experts=num_local_experts),
            activation=activation if activation is not None else SwiGLUStep(),
            backend=CakeStepFunConfig(),
        )
        try:
            return config.prepare_weights(w1, w2, step_limits=step_limits,
                                          hidden_states_scale_global=hidden_states_scale_global,
                                          intermediate_scale_global=intermediate_scale_global)
        except _cakemoe.Error as e:
            raise _renamed(e, _PREPARE_NAMES) from None

    @staticmethod
    def prepare_activations(hidden, *, quant, hidden_states_scale_global=None):
        """(hidden_states, hidden_states_scale, per_token_scale) of bf16 ``hidden`` [T, H] for
        the quant pair (``StepFunActivations``); fp8 and nvfp4 need the weights' a_gs."""
        return prepare_activations(hidden, family=quant.family,
                                   hidden_states_scale_global=hidden_states_scale_global or 0.0)


# Config fields as prepare_weights(w1, w2, ...) of the backend names them.
_PREPARE_NAMES = {
    "experts.intermediate_size": "intermediate_size",
    "experts.local_num_experts": "num_local_experts",
    "experts.local_expert_offset": "local_expert_offset",
}


def _renamed(error, names):
    argument = getattr(error, "argument", None)
    if argument not in names:
        return error
    return make_error(type(error), names[argument], error.rule)


@dataclass
class MoEConfig:
    """A whole StepFun layer: routing, quant pair, experts, activation, backend, routing input,
    execution and finalize options (spec §9.4). ``routing``, ``experts`` and ``backend`` are
    required; ``validate()`` returns the family the config selects.

    Examples
    --------
    >>> config = cakemoe.MoEConfig(routing=cakemoe.RoutingConfig(num_experts=8, top_k=2),
    ...                            quant=cakemoe.QuantConfig.bf16(),
    ...                            experts=cakemoe.ExpertConfig(intermediate_size=128),
    ...                            backend=cakemoe.CakeStepFunConfig())
    >>> config.validate()
    'bf16'
    """

    routing: Optional[RoutingConfig] = None
    quant: QuantConfig = field(default_factory=QuantConfig)
    experts: Optional[ExpertConfig] = None
    activation: Activation = field(default_factory=SwiGLUStep)
    backend: Optional[CakeStepFunConfig] = None
    routing_input: RoutingInputMode = RoutingInputMode.FromLogits
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    finalize: MoEFinalizeConfig = field(default_factory=MoEFinalizeConfig)
    lora_deltas: bool = False

    def validate(self):
        """Checks every rule the configuration alone decides; returns the family name."""
        return _cakemoe.validate_config(_flatten(self))

    def prepare_weights(self, w1, w2, *, step_limits=None, hidden_states_scale_global=None,
                        intermediate_scale_global=None):
        """Weights for this config's family and local experts from bf16 w1 [E or E_loc, 2I, H]
        and w2 [E or E_loc, H, I]; see ``CakeStepFunConfig.prepare_weights``.

        Examples
        --------
        >>> w = config.prepare_weights(w1, w2, step_limits=[7.0] * 8)
        """
        kwargs = dict(w1=_arrays.export("w1", w1), w2=_arrays.export("w2", w2),
                      step_limits=_limits(step_limits),
                      hidden_states_scale_global=hidden_states_scale_global or 0.0,
                      intermediate_scale_global=intermediate_scale_global or 0.0)
        with _arrays.device_context(w1):
            d = _cakemoe.prepare_weights_for_config(_flatten(self), kwargs)
        return weights_from_binding(d, _arrays.framework(w1))

    def prepare_activations(self, weights, hidden):
        """The family's activations (``StepFunActivations``) of bf16 ``hidden`` [T, H] with the
        a_gs in ``weights``.

        Examples
        --------
        >>> act = config.prepare_activations(w, hidden)
        """
        _require_weights(weights)
        with _arrays.device_context(hidden):
            d = _cakemoe.prepare_activations_for_config(
                _flatten(self), weights._binding_dict(), _arrays.export("hidden", hidden))
        return activations_from_binding(d, _arrays.framework(hidden))


def _enum_value(value, cls, name):
    if isinstance(value, cls):
        return value.value
    if isinstance(value, str):
        return value  # the binding checks the name
    raise type_error(name, f"a cakemoe.{cls.__name__}", value)


def _section(value, cls, name):
    if value is None:
        raise make_error(_cakemoe.ArgumentTypeError, name,
                         f"is required (a cakemoe.{cls.__name__})")
    if not isinstance(value, cls):
        raise type_error(name, f"a cakemoe.{cls.__name__}", value)
    return value


def _flatten(config, only=None):
    """The config as the binding's flat dict of dotted field names."""
    if only == "quant":
        q = _section(config, QuantConfig, "quant")
        return {"quant.weights": _enum_value(q.weights, QuantFormat, "quant.weights"),
                "quant.activations": _enum_value(q.activations, QuantFormat, "quant.activations"),
                "quant.per_token_scale": q.per_token_scale}
    r = _section(config.routing, RoutingConfig, "routing")
    x = _section(config.experts, ExpertConfig, "experts")
    a = _section(config.activation, Activation, "activation")
    b = _section(config.backend, CakeStepFunConfig, "backend")
    e = _section(config.execution, ExecutionConfig, "execution")
    f = _section(config.finalize, MoEFinalizeConfig, "finalize")
    d = _flatten(config.quant, "quant")
    d.update({
        "routing.num_experts": r.num_experts,
        "routing.top_k": r.top_k,
        "routing.method": _enum_value(r.method, RoutingMethodType, "routing.method"),
        "routing.use_routing_bias": r.use_routing_bias,
        "routing.routing_bias": _arrays.export("routing.routing_bias", r.routing_bias),
        "routing.n_group": r.n_group,
        "routing.topk_group": r.topk_group,
        "routing.routed_scaling_factor": r.routed_scaling_factor,
        "experts.intermediate_size": x.intermediate_size,
        "experts.local_expert_offset": x.local_expert_offset,
        "experts.local_num_experts": -1 if x.local_num_experts is None else x.local_num_experts,
        "experts.num_fused_shared_experts": x.num_fused_shared_experts,
        "activation.type": _enum_value(a.type, ActivationType, "activation.type"),
        "activation.limit": a.limit,
        "backend": b.backend,
        "routing_input": _enum_value(config.routing_input, RoutingInputMode, "routing_input"),
        "execution.enable_pdl": e.enable_pdl,
        "execution.tune_max_num_tokens": e.tune_max_num_tokens,
        "finalize.do_finalize": f.do_finalize,
        "lora_deltas": config.lora_deltas,
    })
    return d


def _require_weights(weights):
    if not isinstance(weights, StepFunWeights):
        raise type_error("weights", "a cakemoe.StepFunWeights (from prepare_weights)", weights)
