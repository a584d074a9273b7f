"""Prepared StepFun launches: the C++ launch, the arrays it points into, and its stream."""

from . import _arrays
from ._arrays import check_signatures, signature


class _Bound:
    """The caller's arrays a C++ launch holds pointers to: kept alive, re-checked per launch."""

    def __init__(self, arrays):
        self.arrays = {name: t for name, t in arrays.items() if t is not None}
        self.signatures = {name: signature(t) for name, t in self.arrays.items()}

    def check(self):
        check_signatures(self.arrays, self.signatures)


class StepFunStageLaunch:
    """One StepFun stage bound to caller-owned buffers (spec stepfun §9.2).

    ``launch(stream=None)`` enqueues the stage on ``stream`` (default: torch's current stream for
    CUDA tensors; the CPU engine runs it at once). It allocates nothing and never syncs the host,
    so it can be captured in a CUDA graph. Buffers may change contents between launches, not
    storage, shape or strides (checked on every launch).
    """

    def __init__(self, core, arrays, ref):
        self._core = core
        self._bound = _Bound(arrays)
        self._ref = ref

    def launch(self, stream=None):
        """Enqueues the stage on ``stream`` (torch.cuda.Stream, int handle, or None)."""
        self._bound.check()
        handle = _arrays.stream_handle(self._ref, stream)
        with _arrays.device_context(self._ref):
            self._core.launch(handle)


class StepFunMoeLaunch:
    """A prepared StepFun layer (spec stepfun §9.2): routing -> FC1 -> (requant) -> FC2 ->
    finalize on intermediates it owns.

    ``launch(stream=None)`` allocates nothing, never syncs the host and can be captured in a CUDA
    graph (``torch.cuda.graph``); ``outputs()`` are the same arrays after every launch. Valid for
    the token count T it was prepared with. The intermediates (and a default ``output``) are
    allocated by cakemoe (cudaMalloc on CUDA, not torch's caching allocator) and freed when the
    launch is garbage collected; pass ``output`` to write into a tensor of yours. They are
    zero-filled once when the layer is prepared (prepare waits for that fill), so rows no launch
    routes to read as zeros or as an earlier launch left them.
    """

    def __init__(self, core, arrays, ref):
        self._core = core
        self._bound = _Bound(arrays)
        self._ref = ref
        self._like = _arrays.framework(ref)
        self._outputs = None

    def launch(self, stream=None):
        """Enqueues the layer on ``stream`` (torch.cuda.Stream, int handle, or None: torch's
        current stream for CUDA tensors)."""
        self._bound.check()
        handle = _arrays.stream_handle(self._ref, stream)
        with _arrays.device_context(self._ref):
            self._core.launch(handle)

    def outputs(self):
        """``[output]`` (bf16 [T, H]) or, prepared with ``do_finalize=False``, ``[gemm2_output
        (bf16 [max_padded, H]), expert_weights ([T, K] bf16 router weights or the caller's
        topk_weights), expanded_idx_to_permuted_idx (int32 [T*K])]``.

        Arrays the caller passed in (``output``, ``topk_weights``) come back as the caller's own
        objects; the others are views of the launch's buffers (they keep the launch alive).
        """
        if self._outputs is None:
            self._outputs = [self._caller_array(ref) for ref in self._core.outputs()]
        return list(self._outputs)

    def _caller_array(self, ref):
        for name in ("output", "topk_weights"):
            t = self._bound.arrays.get(name)
            if t is not None and signature(t) is not None and signature(t)[0] == ref.data_ptr:
                return t
        return _arrays.to_framework(ref, self._like)

    @property
    def plan(self):
        """The cakemoe.Plan the layer runs (given or default_plan)."""
        return self._core.plan

    def __repr__(self):
        return f"StepFunMoeLaunch(plan={self.plan!r})"
