# Type stubs of cakemoe.stepfun (the stage entries are made at import time, so type checkers
# read their signatures here). _Array: a torch tensor, a numpy array or any __dlpack__ object.
from collections.abc import Mapping
from typing import Any, Iterator, NamedTuple, Optional, Sequence, Union

from ._cakemoe import Plan as Plan

_Array = Any
_Stream = Any  # torch.cuda.Stream, an int cudaStream_t handle, or None
_Device = Any  # "cpu", "cuda", "cuda:N" or a torch.device

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

class StepFunStageLaunch:
    def __init__(self, core: Any, arrays: Mapping[str, _Array], ref: _Array) -> None: ...
    def launch(self, stream: _Stream = ...) -> None: ...

class StepFunMoeLaunch:
    def __init__(self, core: Any, arrays: Mapping[str, _Array], ref: _Array) -> None: ...
    def launch(self, stream: _Stream = ...) -> None: ...
    def outputs(self) -> list[_Array]: ...
    @property
    def plan(self) -> Plan: ...

class StepFunWeights(Mapping[str, Optional[_Array]]):
    family: str
    hidden_states_scale_global: float
    intermediate_scale_global: float
    gemm1_weights: _Array
    gemm1_weights_scale: Optional[_Array]
    gemm2_weights: _Array
    gemm2_weights_scale: Optional[_Array]
    output1_scale_scalar: Optional[_Array]
    output1_scale_gate_scalar: Optional[_Array]
    output2_scale_scalar: Optional[_Array]
    gemm1_clamp_limit: _Array
    def __init__(self, family: str, tensors: Mapping[str, Optional[_Array]],
                 hidden_states_scale_global: float = ...,
                 intermediate_scale_global: float = ...) -> None: ...
    def __getitem__(self, key: str) -> Optional[_Array]: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...
    def tensors(self) -> dict[str, _Array]: ...

class StepFunActivations(NamedTuple):
    hidden_states: _Array
    hidden_states_scale: Optional[_Array] = ...
    per_token_scale: Optional[_Array] = ...

def stepfun_moe(
    *,
    family: str,
    hidden_states: _Array,
    hidden_states_scale: Optional[_Array] = ...,
    gemm1_weights: _Array,
    gemm1_weights_scale: Optional[_Array] = ...,
    output1_scale_scalar: Optional[_Array] = ...,
    output1_scale_gate_scalar: Optional[_Array] = ...,
    gemm1_clamp_limit: _Array,
    per_token_scale: Optional[_Array] = ...,
    gemm2_weights: _Array,
    gemm2_weights_scale: Optional[_Array] = ...,
    output2_scale_scalar: Optional[_Array] = ...,
    routing_logits: Optional[_Array] = ...,
    topk_ids: Optional[_Array] = ...,
    topk_weights: Optional[_Array] = ...,
    num_experts: int,
    top_k: int,
    local_expert_offset: int = ...,
    local_num_experts: Optional[int] = ...,
    plan: Optional[Plan] = ...,
    output: Optional[_Array] = ...,
    do_finalize: bool = ...,
    enable_pdl: bool = ...,
    reserved_sms: int = ...,
    global_scale_inv: float = ...,
    routed_scaling_factor: float = ...,
    poison_routing_tail: bool = ...,
    autotune: bool = ...,
    autotune_reps: int = ...,
    stream: _Stream = ...,
) -> list[_Array]: ...
def prepare_stepfun_moe(**kwargs: Any) -> StepFunMoeLaunch: ...
def autotune_cache_size() -> int: ...
def clear_autotune_cache() -> None: ...

def prepare_routing(**kwargs: Any) -> StepFunStageLaunch: ...
def prepare_fc1(**kwargs: Any) -> StepFunStageLaunch: ...
def prepare_requant(**kwargs: Any) -> StepFunStageLaunch: ...
def prepare_fc2(**kwargs: Any) -> StepFunStageLaunch: ...
def prepare_finalize(**kwargs: Any) -> StepFunStageLaunch: ...
def routing(*, stream: _Stream = ..., **kwargs: Any) -> None: ...
def fc1(*, stream: _Stream = ..., **kwargs: Any) -> None: ...
def requant(*, stream: _Stream = ..., **kwargs: Any) -> None: ...
def fc2(*, stream: _Stream = ..., **kwargs: Any) -> None: ...
def finalize(*, stream: _Stream = ..., **kwargs: Any) -> None: ...

def plans_for(*, family: str, num_tokens: int, top_k: int, local_num_experts: int,
              hidden_size: int, intermediate_size: int, logits_input: bool = ...,
              device: _Device = ...) -> list[Plan]: ...
def default_plan(*, family: str, num_tokens: int, top_k: int, local_num_experts: int,
                 hidden_size: int, intermediate_size: int, logits_input: bool = ...,
                 device: _Device = ...) -> Plan: ...
def max_ctas(num_tokens: int, top_k: int, num_experts: int, tile_tokens_dim: int) -> int: ...
def max_padded(num_tokens: int, top_k: int, num_experts: int, tile_tokens_dim: int) -> int: ...

def prepare_weights(w1: _Array, w2: _Array, *, family: str,
                    step_limits: Union[None, float, Sequence[float], _Array] = ...,
                    local_expert_offset: int = ..., local_num_experts: Optional[int] = ...,
                    hidden_states_scale_global: float = ...,
                    intermediate_scale_global: float = ...) -> StepFunWeights: ...
def prepare_activations(hidden: _Array, *, family: str,
                        hidden_states_scale_global: float = ...) -> StepFunActivations: ...
