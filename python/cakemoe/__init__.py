"""cakemoe: MoE kernels for LLM serving (Python layer over the C++ library).

BGMV MoE-LoRA (spec ../shared/spec/bgmv.md)::

    plan = cakemoe.prepare_bgmv_moe(x, [lora_a], [lora_b], sorted_token_ids, expert_ids,
                                    lora_indices, topk_weights, num_experts)
    y = plan.run()            # y_accum [T, S*F] float32, the same tensor object every call

Arrays travel through DLPack: torch tensors (CUDA: the Cake path or the portable fallback; CPU:
the reference engine) and numpy arrays (CPU reference engine). torch is never imported here
unless the caller passes torch tensors.
"""

import contextlib
import warnings

from . import _cakemoe
from ._cakemoe import CudaError, Error, InvalidArgument, Unsupported, with_cuda

__all__ = [
    "BgmvPlan",
    "CudaError",
    "Error",
    "InvalidArgument",
    "Unsupported",
    "prepare_bgmv_moe",
    "set_warning_hook",
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


def _is_torch(t):
    return type(t).__module__.startswith("torch")


def _exportable(t):
    # torch refuses to export tensors that require grad; a detached view shares the storage.
    if _is_torch(t) and t.requires_grad:
        return t.detach()
    return t


def _signature(t):
    """(storage address, shape, strides) of a bound array: what a plan's pointers depend on."""
    if _is_torch(t):
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()))
    iface = t.__array_interface__
    return (iface["data"][0], tuple(t.shape), tuple(t.strides))


def _dtype_name(t):
    """numpy-style dtype name of a torch tensor or numpy array ("bfloat16", "float32", ...)."""
    return str(t.dtype).replace("torch.", "")


def _empty_like_framework(ref, shape, dtype_name):
    if _is_torch(ref):
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype_name), device=ref.device)
    import numpy

    return numpy.empty(shape, dtype=dtype_name)


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
        if stream is not None:
            return int(getattr(stream, "cuda_stream", stream))
        if _is_torch(self._x) and self._x.is_cuda:
            import torch

            return torch.cuda.current_stream(self._x.device).cuda_stream
        return 0

    def run(self, stream=None):
        """Enqueues the plan on ``stream`` (torch.cuda.Stream, an int handle, or None for
        torch's current stream / the default stream) and returns ``y_accum``."""
        self._check_bindings()
        handle = self._stream(stream)
        try:
            with _device_context(self._x):
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
        array = self._core.route_index
        if array is None:
            return None
        if _is_torch(self._x):
            import torch

            return torch.from_dlpack(array)
        import numpy

        return numpy.from_dlpack(array)

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
    of a wider row-major buffer); when absent they are allocated here with x's framework and
    device. Bad input raises cakemoe.InvalidArgument (a ValueError) naming the argument; inputs
    the Cake path cannot take fall back to the portable path with one RuntimeWarning per reason,
    or raise cakemoe.Unsupported (a ValueError) with fallback=False.
    """
    lora_a_weights = list(lora_a_weights)
    lora_b_weights = list(lora_b_weights)
    if y_accum is None and _shapes_known(x, lora_b_weights):
        width = sum(int(b.shape[2]) for b in lora_b_weights)
        y_accum = _empty_like_framework(x, (int(x.shape[0]), width), "float32")
    if shrink_out is None and _shapes_known(x, lora_a_weights) and hasattr(sorted_token_ids, "shape"):
        shape = (len(lora_a_weights), int(sorted_token_ids.shape[0]), int(lora_a_weights[0].shape[2]))
        shrink_out = _empty_like_framework(x, shape, _dtype_name(x))
    bound = {
        "x": x,
        "sorted_token_ids": sorted_token_ids,
        "expert_ids": expert_ids,
        "lora_indices": lora_indices,
        "topk_weights": topk_weights,
    }
    for i, t in enumerate(lora_a_weights):
        bound[f"lora_a_weights[{i}]"] = t
    for i, t in enumerate(lora_b_weights):
        bound[f"lora_b_weights[{i}]"] = t
    if shrink_out is not None:
        bound["shrink_out"] = shrink_out
    if y_accum is not None:
        bound["y_accum"] = y_accum
    ex = _exportable
    with _device_context(x):
        core = _cakemoe.prepare_bgmv_moe(
            ex(x),
            [ex(t) for t in lora_a_weights],
            [ex(t) for t in lora_b_weights],
            ex(sorted_token_ids),
            ex(expert_ids),
            ex(lora_indices),
            ex(topk_weights),
            int(num_experts),
            backend,
            bool(fallback),
            None if shrink_out is None else ex(shrink_out),
            None if y_accum is None else ex(y_accum),
            grouped,
            order_remap,
        )
    return BgmvPlan(core, bound, y_accum, shrink_out, x)


def _shapes_known(x, weights):
    # Allocate defaults only for plausible inputs; anything else goes to the C++ validation,
    # which raises the typed error naming the argument.
    try:
        return (
            len(x.shape) == 2
            and len(weights) > 0
            and all(len(w.shape) == 4 for w in weights)
            and _dtype_name(x) in ("bfloat16", "float16")
        )
    except (AttributeError, TypeError):
        return False


def _device_context(x):
    if _is_torch(x) and x.is_cuda:
        import torch

        return torch.cuda.device(x.device)
    return contextlib.nullcontext()
