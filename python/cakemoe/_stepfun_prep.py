"""StepFun weight and activation preparation (spec stepfun §4.3, §4.4): logical bf16 matrices
into a family's physical view, and the result objects."""

from collections.abc import Mapping
from typing import NamedTuple

from . import _arrays, _cakemoe
from ._errors import type_error, warn_experimental

_TENSOR_KEYS = (
    "gemm1_weights",
    "gemm1_weights_scale",
    "gemm2_weights",
    "gemm2_weights_scale",
    "output1_scale_scalar",
    "output1_scale_gate_scalar",
    "output2_scale_scalar",
    "gemm1_clamp_limit",
)
# spec §9.4: the fp8 weight view spells the three scalars with "scales".
_ALIASES = {
    "output1_scales_scalar": "output1_scale_scalar",
    "output1_scales_gate_scalar": "output1_scale_gate_scalar",
    "output2_scales_scalar": "output2_scale_scalar",
}


class StepFunWeights(Mapping):
    """A family's weight view (the "cake_stepfun" keys of spec §9.4), from ``prepare_weights``.

    Keys (also attributes): ``gemm1_weights``, ``gemm1_weights_scale``, ``gemm2_weights``,
    ``gemm2_weights_scale``, ``output1_scale_scalar``, ``output1_scale_gate_scalar``,
    ``output2_scale_scalar`` (float32 [E_loc]; the fp8 spellings ``output1_scales_scalar`` etc.
    work too), ``gemm1_clamp_limit`` (float32 [E_loc], family units); absent ones are None.
    ``family``, ``hidden_states_scale_global`` (a_gs) and ``intermediate_scale_global`` (c_gs)
    are attributes. Tensors live on w1's device, in its framework (numpy: bf16 as uint16, e4m3,
    ue8m0 and packed e2m1 as uint8; torch: bfloat16, float8_e4m3fn, uint8).
    """

    def __init__(self, family, tensors, hidden_states_scale_global=0.0,
                 intermediate_scale_global=0.0):
        self.family = family
        self._tensors = {k: tensors.get(k) for k in _TENSOR_KEYS}
        self.hidden_states_scale_global = float(hidden_states_scale_global)
        self.intermediate_scale_global = float(intermediate_scale_global)

    def __getitem__(self, key):
        return self._tensors[_ALIASES.get(key, key)]

    def __iter__(self):
        return iter(_TENSOR_KEYS)

    def __len__(self):
        return len(_TENSOR_KEYS)

    def __getattr__(self, key):
        tensors = self.__dict__.get("_tensors")
        if tensors is not None and _ALIASES.get(key, key) in tensors:
            return tensors[_ALIASES.get(key, key)]
        raise AttributeError(key)

    def tensors(self):
        """The defined tensors as keyword arguments of ``stepfun_moe`` / ``prepare_stepfun_moe``."""
        return {k: v for k, v in self._tensors.items() if v is not None}

    def _binding_dict(self):
        d = {k: _arrays.export(k, v) for k, v in self._tensors.items() if v is not None}
        d.update(family=self.family, hidden_states_scale_global=self.hidden_states_scale_global,
                 intermediate_scale_global=self.intermediate_scale_global)
        return d

    def __repr__(self):
        shapes = {k: tuple(v.shape) for k, v in self._tensors.items() if v is not None}
        return f"StepFunWeights(family={self.family!r}, {shapes})"


class StepFunActivations(NamedTuple):
    """Activations in a family's input format (``prepare_activations``).

    hidden_states : [T, H] bf16 | e4m3 (fp8, mxfp8) | uint8 [T, H/2] packed e2m1 (nvfp4*)
    hidden_states_scale : nvfp4*: e4m3 [T, H/16] linear; mxfp8: ue8m0 (uint8) [T, H/32]; else None
    per_token_scale : nvfp4_bf16tok: float32 [T] decode scales; else None
    """

    hidden_states: object
    hidden_states_scale: object = None
    per_token_scale: object = None


def weights_from_binding(d, like):
    tensors = {k: _arrays.to_framework(d[k], like) for k in _TENSOR_KEYS}
    return StepFunWeights(d["family"], tensors, d["hidden_states_scale_global"],
                          d["intermediate_scale_global"])


def activations_from_binding(d, like):
    fields = StepFunActivations._fields
    return StepFunActivations(*(_arrays.to_framework(d[k], like) for k in fields))


def _limits(step_limits):
    if step_limits is None or isinstance(step_limits, (int, float)):
        return step_limits
    if hasattr(step_limits, "tolist"):  # a torch tensor or numpy array
        return step_limits.tolist()
    if isinstance(step_limits, (list, tuple)):
        return list(step_limits)
    raise type_error("step_limits", "a float or a sequence of floats", step_limits)


def prepare_weights(w1, w2, *, family, step_limits=None, local_expert_offset=0,
                    local_num_experts=None, hidden_states_scale_global=0.0,
                    intermediate_scale_global=0.0):
    """Quantizes and lays out logical bf16 weights for ``family`` (spec §4.3, §4.4).

    Parameters
    ----------
    w1 : tensor bf16 [E, 2I, H]
        FC1 weights, rows [up; gate] per expert (HF ``up_proj`` then ``gate_proj``).
    w2 : tensor bf16 [E, H, I]
        FC2 weights.
    family : str
        ``"nvfp4"``, ``"nvfp4_bf16tok"``, ``"bf16"``, ``"fp8"`` or ``"mxfp8"``.
    step_limits : float or sequence of float, optional
        SwiGLUStep limit L per local expert ([E_loc]) or one value for all (default 7.0).
    local_expert_offset, local_num_experts : int
        Experts [off, off + count) of w1 / w2 are prepared (default all).
    hidden_states_scale_global : float
        a_gs, the activation encode scale; required (> 0) for fp8 and nvfp4.
    intermediate_scale_global : float
        c_gs, the FC1-output encode scale (nvfp4, fp8); 0 picks the bound default.

    Returns
    -------
    StepFunWeights
        On w1's device and framework.

    Examples
    --------
    >>> w = cakemoe.stepfun.prepare_weights(w1, w2, family="nvfp4", step_limits=[7.0] * 8,
    ...                                     hidden_states_scale_global=56.0)
    >>> w["gemm1_weights"].shape  # (E, 2I, H/2) packed e2m1
    """
    warn_experimental()
    kwargs = dict(w1=_arrays.export("w1", w1), w2=_arrays.export("w2", w2), family=family,
                  step_limits=_limits(step_limits),
                  local_expert_offset=local_expert_offset,
                  hidden_states_scale_global=hidden_states_scale_global,
                  intermediate_scale_global=intermediate_scale_global)
    if local_num_experts is not None:
        kwargs["local_num_experts"] = local_num_experts
    with _arrays.device_context(w1):
        d = _cakemoe.prepare_weights(kwargs)
    return weights_from_binding(d, _arrays.framework(w1))


def prepare_activations(hidden, *, family, hidden_states_scale_global=0.0):
    """Quantizes bf16 activations into ``family``'s input format (spec §4.1, §4.2).

    Parameters
    ----------
    hidden : tensor bf16 [T, H]
    family : str
    hidden_states_scale_global : float
        The a_gs of the weights (fp8, nvfp4; ``StepFunWeights.hidden_states_scale_global``).

    Returns
    -------
    StepFunActivations
        (hidden_states, hidden_states_scale, per_token_scale), in ``hidden``'s framework.

    Examples
    --------
    >>> act = cakemoe.stepfun.prepare_activations(x, family="mxfp8")
    >>> act.hidden_states.shape, act.hidden_states_scale.shape  # (T, H), (T, H/32)
    """
    warn_experimental()
    kwargs = dict(hidden=_arrays.export("hidden", hidden), family=family,
                  hidden_states_scale_global=hidden_states_scale_global)
    with _arrays.device_context(hidden):
        d = _cakemoe.prepare_activations(kwargs)
    return activations_from_binding(d, _arrays.framework(hidden))
