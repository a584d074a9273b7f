"""The StepFun MoE layer under expert parallelism (EP) over NCCL, from Python (issue 29; C++:
``include/cakemoe/stepfun_ep.h``, design: docs/decisions/stepfun-ep.md).

Each rank (one process per GPU) holds its own tokens and a contiguous slice of the experts; one
``launch`` routes the rank's tokens, sends them to the ranks owning their experts over NCCL, runs
the local StepFun layer there and brings the weighted partial outputs back. torch does not expose
a process group's ``ncclComm_t``, so cakemoe makes its own communicator over the same ranks:
``Communicator.from_process_group`` shares an NCCL unique id through the group (any backend,
gloo included) and every rank joins on its current CUDA device.

Set ``NCCL_NVLS_ENABLE=0`` in the environment where NVLink multicast must stay off: the library
leaves NCCL's switches to the caller.

Example (one process per GPU, e.g. ``torchrun --nproc-per-node 2 script.py``)::

    import torch, torch.distributed as dist, cakemoe
    dist.init_process_group("gloo")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    comm = cakemoe.stepfun_ep.Communicator.from_process_group()
    layer = cakemoe.stepfun_ep.prepare_ep(comm, family="bf16", hidden_states=x,
                                          routing_logits=logits, num_experts=E, top_k=K,
                                          local_expert_offset=off, local_num_experts=E_loc,
                                          **weights.tensors())
    layer.launch()
    out = layer.output()  # bf16 [T, H]: this rank's tokens
"""

import contextlib
import dataclasses
import numbers

from . import _arrays, _cakemoe
from ._cakemoe import ArgumentTypeError, Unsupported
from ._errors import invalid, make_error, type_error, warn_experimental
from ._launch import _Bound

__all__ = [
    "Communicator",
    "EpLaunch",
    "EpSizes",
    "available",
    "new_unique_id",
    "prepare_ep",
]

UNIQUE_ID_BYTES = _cakemoe.ep_unique_id_bytes  # ncclUniqueId


def available():
    """True when this build of cakemoe has the EP layer (CUDA and NCCL compiled in).

    Examples
    --------
    >>> if not cakemoe.stepfun_ep.available():
    ...     print("no EP layer in this build")
    """
    return bool(_cakemoe.ep_available())


def new_unique_id():
    """A fresh NCCL unique id (``ncclGetUniqueId``), ``bytes`` of length 128.

    One rank makes it and hands the same bytes to every rank's ``Communicator.from_unique_id``
    (a file, a store, a broadcast). Raises ``cakemoe.Unsupported`` in builds without NCCL.

    Examples
    --------
    >>> uid = cakemoe.stepfun_ep.new_unique_id()  # on one rank, then shared
    """
    return bytes(_cakemoe.ep_new_unique_id())


def _is_int(value):
    """int and numpy integers, not bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _device_index(device):
    """A CUDA device index from None (torch's current device), an int, "cuda[:N]" or a
    torch.device."""
    if device is None:
        try:
            import torch
        except ImportError:
            raise invalid("device",
                          "None needs torch (its current CUDA device); pass an int") from None
        if not torch.cuda.is_available():
            raise invalid("device", "None means torch's current CUDA device, but torch sees none")
        return torch.cuda.current_device()
    if _is_int(device):
        return int(device)
    if isinstance(device, str) or type(device).__name__ == "device":
        kind, _, index = str(device).partition(":")
        if kind != "cuda" or (index and not index.isdigit()):
            raise invalid("device",
                          f'must be a CUDA device ("cuda", "cuda:N" or N), got {device!r}')
        if index:
            return int(index)
        return _device_index(None)
    raise type_error("device", "an int, a str or a torch.device", device)


class Communicator:
    """An NCCL communicator cakemoe created (``ncclCommInitRank``) over the ranks of a process
    group, on one CUDA device per rank. It is destroyed when the last reference goes away; every
    ``EpLaunch`` prepared with it holds one.

    Make it with ``from_process_group`` (torch.distributed) or ``from_unique_id`` (any other
    bootstrap). Attributes: ``rank``, ``world_size``, ``device`` (CUDA device index).
    """

    def __init__(self, core, group=None):
        self._core = core
        self._group = group

    @classmethod
    def from_process_group(cls, group=None, device=None):
        """Collective over ``group``: a communicator with the group's ranks and world size.

        Rank 0 of the group makes the NCCL unique id; one ``all_gather_object`` over the group
        (so any backend works, gloo included) shares it together with every rank's own checks,
        so a rank that cannot join makes every rank raise instead of the others waiting in
        ``ncclCommInitRank``. Then every rank joins on ``device``.

        Parameters
        ----------
        group : torch.distributed.ProcessGroup, optional
            Default: the world group. torch.distributed must be initialized.
        device : int, str or torch.device, optional
            The rank's CUDA device; default torch's current device (``torch.cuda.set_device``).

        Returns
        -------
        Communicator

        Examples
        --------
        >>> dist.init_process_group("gloo"); torch.cuda.set_device(local_rank)
        >>> comm = cakemoe.stepfun_ep.Communicator.from_process_group()
        """
        import torch
        import torch.distributed as dist

        if not available():
            raise make_error(Unsupported, "group", "this build of cakemoe has no EP layer "
                             "(it needs CUDA and NCCL; see cakemoe.stepfun_ep.available())")
        if not dist.is_available() or not dist.is_initialized():
            raise invalid("group", "torch.distributed is not initialized "
                          "(call torch.distributed.init_process_group first)")
        if group is None:
            group = dist.group.WORLD
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise invalid("group", "this process is not a member of the group")
        local_error, status = _local_status(device, rank)
        statuses = [None] * world
        # NOTE: with the NCCL backend torch gathers on the current device: make it the rank's.
        with _device_guard(torch, status.get("device")):
            dist.all_gather_object(statuses, status, group=group)
        unique_id = _agreed_unique_id(statuses, local_error)
        core = _cakemoe.ep_create_communicator(dict(
            unique_id=unique_id, rank=rank, world_size=world, device=status["device"]))
        return cls(core, group)

    @classmethod
    def from_unique_id(cls, unique_id, *, rank, world_size, device=None):
        """Collective over ``world_size`` processes: joins the communicator of ``unique_id``
        (``new_unique_id()`` bytes, the same on every rank) as ``rank``.

        Bad arguments raise ``cakemoe.InvalidArgument`` / ``ArgumentTypeError`` naming them
        (``unique_id`` of 128 bytes, ``0 <= rank < world_size``, ``device`` a CUDA device) before
        anything is created; builds without NCCL then raise ``cakemoe.Unsupported``.

        Examples
        --------
        >>> comm = Communicator.from_unique_id(uid, rank=r, world_size=n, device=r)
        """
        if device is None and not available():
            device = 0  # NOTE: nothing will be created (no NCCL): the argument checks still run
        core = _cakemoe.ep_create_communicator(dict(
            unique_id=unique_id, rank=rank, world_size=world_size, device=_device_index(device)))
        return cls(core)

    @property
    def rank(self):
        return self._core.rank

    @property
    def world_size(self):
        return self._core.world_size

    @property
    def device(self):
        """The CUDA device index the communicator runs on."""
        return self._core.device

    @property
    def group(self):
        """The torch process group it was made from (None for ``from_unique_id``)."""
        return self._group

    def __repr__(self):
        return (f"Communicator(rank={self.rank}, world_size={self.world_size}, "
                f"device=cuda:{self.device})")


def _local_status(device, rank):
    """(the error this rank hit or None, what it shares in from_process_group): its device or
    its error as text, and on rank 0 the unique id."""
    try:
        index = _device_index(device)
        import torch

        count = torch.cuda.device_count()
        if not 0 <= index < count:
            raise invalid("device", f"must be a CUDA device of this process (it sees {count}), "
                          f"got {index}")
        status = {"device": index}
        if rank == 0:
            status["unique_id"] = new_unique_id()
        return None, status
    except _cakemoe.Error as e:
        return e, {"error": f"{type(e).__name__}: {e}"}


def _agreed_unique_id(statuses, local_error):
    """Rank 0's unique id when every rank could join; else the error this rank raises: its own,
    or InvalidArgument("group") naming the first rank that failed (every rank raises)."""
    if local_error is not None:
        raise local_error
    for peer, peer_status in enumerate(statuses):
        if "error" in peer_status:
            raise invalid("group", f"rank {peer} of the group cannot join the communicator "
                          f"({peer_status['error']})")
    return statuses[0]["unique_id"]


def _device_guard(torch, device):
    """torch.cuda.device(device), or nothing when the rank has no device."""
    return torch.cuda.device(device) if device is not None else contextlib.nullcontext()


@dataclasses.dataclass(frozen=True)
class EpSizes:
    """Static sizes of a prepared EP layer (the worst case: every NCCL transfer has this size).

    Attributes
    ----------
    world_size, rank : int
    num_tokens : int
        T of this rank.
    rows_per_peer : int
        Max T over the ranks (a token goes at most once to a peer).
    layer_rows : int
        ``world_size * rows_per_peer``: rows of the local layer.
    dispatch_row_bytes, combine_row_bytes : int
        Bytes of one token in dispatch (hidden + scales + ids + weights) and combine (bf16 row).
    dispatch_wire_bytes, combine_wire_bytes : int
        Bytes this rank sends to other ranks per launch in each direction.
    """

    world_size: int
    rank: int
    num_tokens: int
    rows_per_peer: int
    layer_rows: int
    dispatch_row_bytes: int
    combine_row_bytes: int
    dispatch_wire_bytes: int
    combine_wire_bytes: int


class EpLaunch:
    """A prepared EP layer of one rank (C++ ``stepfun::ep::EpLaunch``).

    ``launch(stream=None)`` = ``launch_dispatch`` + ``launch_layer`` + ``launch_combine`` on
    ``stream`` (default: torch's current stream of ``hidden_states``' device). It allocates
    nothing, never syncs the host and can be captured in a CUDA graph. Every rank must launch the
    same number of times (NCCL collectives). ``output()`` is the same tensor after every launch.
    The bound tensors must keep their storage, shape and strides (checked per launch); the
    communicator is kept alive by this object.
    """

    def __init__(self, core, comm, arrays, ref):
        self._core = core
        self._comm = comm
        self._bound = _Bound(arrays)
        self._ref = ref
        self._like = _arrays.framework(ref)
        self._output = None
        self._sizes = None

    def _run(self, stage, stream):
        self._bound.check()
        handle = _arrays.stream_handle(self._ref, stream)
        with _arrays.device_context(self._ref):
            stage(handle)

    def launch(self, stream=None):
        """Enqueues dispatch, the local layer and combine on ``stream`` (torch.cuda.Stream, an int
        handle, or None: torch's current stream)."""
        self._run(self._core.launch, stream)

    def launch_dispatch(self, stream=None):
        """Routing of the own tokens and the dispatch exchange (for timing)."""
        self._run(self._core.launch_dispatch, stream)

    def launch_layer(self, stream=None):
        """The local StepFun layer on the received rows."""
        self._run(self._core.launch_layer, stream)

    def launch_combine(self, stream=None):
        """Partials back to their tokens' ranks and the per-token sum into ``output()``."""
        self._run(self._core.launch_combine, stream)

    def output(self):
        """bf16 [T, H]: the layer's output for this rank's T tokens (the caller's ``output``
        tensor when one was passed to ``prepare_ep``)."""
        if self._output is None:
            given = self._bound.arrays.get("output")
            self._output = given if given is not None else _arrays.to_framework(
                self._core.output(), self._like)
        return self._output

    def received_counts(self):
        """int32 [world_size] on the device: rows each rank sent here in the last launch
        (all_gather: that rank's T)."""
        return _arrays.to_framework(self._core.received_counts(), self._like)

    @property
    def sizes(self):
        """The static sizes (``EpSizes``)."""
        if self._sizes is None:
            self._sizes = EpSizes(**self._core.sizes)
        return self._sizes

    @property
    def plan(self):
        """The cakemoe.Plan of the local layer."""
        return self._core.plan

    @property
    def communicator(self):
        return self._comm

    def __repr__(self):
        s = self.sizes
        return (f"EpLaunch(rank={s.rank}, world_size={s.world_size}, num_tokens={s.num_tokens}, "
                f"plan={self.plan!r})")


def prepare_ep(comm, *, scheme="all_to_all", **layer_kwargs):
    """Collective over ``comm``'s ranks: validates this rank's layer, agrees with the others and
    allocates every buffer once.

    Parameters
    ----------
    comm : Communicator
        From ``Communicator.from_process_group`` (or ``from_unique_id``).
    scheme : str
        ``"all_to_all"`` (per-destination dispatch, deterministic combine order) or
        ``"all_gather"`` (all-gather + local layer + reduce-scatter).
    **layer_kwargs
        The keyword arguments of ``cakemoe.prepare_stepfun_moe`` for this rank: its T tokens
        (``hidden_states`` [T, H] in the family's format, ``routing_logits`` [T, E] xor
        ``topk_ids`` + ``topk_weights`` [T, K]; T may differ between ranks) and its experts
        ``[local_expert_offset, local_expert_offset + local_num_experts)`` (the ranges, in rank
        order, tile ``[0, num_experts)``). CUDA tensors on ``comm.device``; ``do_finalize`` must
        be True; ``output`` (optional) bf16 [T, H].

    Returns
    -------
    EpLaunch

    Raises
    ------
    cakemoe.InvalidArgument, cakemoe.ArgumentTypeError
        Naming the argument (another rank's bad argument: ``comm``). Every rank raises, none
        is left waiting.
    cakemoe.Unsupported
        Builds without NCCL.

    Examples
    --------
    >>> layer = cakemoe.stepfun_ep.prepare_ep(comm, family="bf16", hidden_states=x,
    ...     routing_logits=logits, num_experts=16, top_k=4, local_expert_offset=8 * comm.rank,
    ...     local_num_experts=8, **weights.tensors())
    >>> layer.launch(); out = layer.output()
    """
    warn_experimental()
    if "stream" in layer_kwargs:
        raise make_error(ArgumentTypeError, "stream",
                         "is not an argument of prepare_ep() (pass it to launch())")
    hidden_states = layer_kwargs.get("hidden_states")
    exported = _arrays.layer_kwargs(layer_kwargs)
    core_comm = comm._core if isinstance(comm, Communicator) else comm
    with _arrays.device_context(hidden_states):
        core = _cakemoe.prepare_ep(core_comm, scheme, exported)
    return EpLaunch(core, comm, _arrays.arrays_of(layer_kwargs), hidden_states)
