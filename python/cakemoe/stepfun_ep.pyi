# Type stubs of cakemoe.stepfun_ep. _Array: a torch tensor, a numpy array or any __dlpack__ object.
from typing import Any, Optional, Union

from ._cakemoe import Plan

_Array = Any
_Stream = Any  # torch.cuda.Stream, an int cudaStream_t handle, or None
_Device = Union[int, str, Any, None]  # N, "cuda", "cuda:N", a torch.device, or None
_ProcessGroup = Any  # torch.distributed.ProcessGroup

__all__ = [
    "Communicator",
    "EpLaunch",
    "EpSizes",
    "available",
    "new_unique_id",
    "prepare_ep",
]

UNIQUE_ID_BYTES: int

def available() -> bool: ...
def new_unique_id() -> bytes: ...

class Communicator:
    def __init__(self, core: Any, group: Optional[_ProcessGroup] = ...) -> None: ...
    @classmethod
    def from_process_group(
        cls, group: Optional[_ProcessGroup] = ..., device: _Device = ...
    ) -> Communicator: ...
    @classmethod
    def from_unique_id(
        cls, unique_id: bytes, *, rank: int, world_size: int, device: _Device = ...
    ) -> Communicator: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def device(self) -> int: ...
    @property
    def group(self) -> Optional[_ProcessGroup]: ...

class EpSizes:
    world_size: int
    rank: int
    num_tokens: int
    rows_per_peer: int
    layer_rows: int
    dispatch_row_bytes: int
    combine_row_bytes: int
    dispatch_wire_bytes: int
    combine_wire_bytes: int
    def __init__(
        self,
        world_size: int,
        rank: int,
        num_tokens: int,
        rows_per_peer: int,
        layer_rows: int,
        dispatch_row_bytes: int,
        combine_row_bytes: int,
        dispatch_wire_bytes: int,
        combine_wire_bytes: int,
    ) -> None: ...

class EpLaunch:
    def __init__(
        self, core: Any, comm: Communicator, arrays: dict[str, _Array], ref: _Array
    ) -> None: ...
    def launch(self, stream: _Stream = ...) -> None: ...
    def launch_dispatch(self, stream: _Stream = ...) -> None: ...
    def launch_layer(self, stream: _Stream = ...) -> None: ...
    def launch_combine(self, stream: _Stream = ...) -> None: ...
    def output(self) -> _Array: ...
    def received_counts(self) -> _Array: ...
    @property
    def sizes(self) -> EpSizes: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def communicator(self) -> Communicator: ...

def prepare_ep(
    comm: Communicator,
    *,
    scheme: str = ...,
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
) -> EpLaunch: ...
