"""Arrays between the caller's framework (torch, numpy, anything with ``__dlpack__``) and the
extension module: what is handed over, what comes back, and on which stream and device."""

import contextlib
import sys

from ._errors import type_error

# numpy dtypes (ml_dtypes) handed over as the unsigned integers of their size: the binding reads
# uint16 as bf16 bits and uint8 as any 8-bit format.
_NUMPY_BITS = {
    "bfloat16": "uint16",
    "float8_e4m3fn": "uint8",
    "float8_e8m0fnu": "uint8",
}
# torch dtypes handed over as uint8 (the binding takes uint8 bytes for every 8-bit format).
_TORCH_BYTES = ("float8_e4m3fn", "float8_e8m0fnu", "float4_e2m1fn_x2")


def is_torch(t):
    return type(t).__module__.startswith("torch")


def is_numpy(t):
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(t, numpy.ndarray)


def framework(t):
    """"torch" for torch tensors, else "numpy" (results come back as numpy arrays)."""
    return "torch" if is_torch(t) else "numpy"


def export(name, value):
    """The object the binding reads for tensor argument ``name`` (None stays None)."""
    if value is None:
        return None
    if is_torch(value):
        t = value.detach() if value.requires_grad else value
        if str(t.dtype).replace("torch.", "") in _TORCH_BYTES:
            import torch

            t = t.view(torch.uint8)
        return t
    if is_numpy(value):
        bits = _NUMPY_BITS.get(value.dtype.name)
        return value.view(bits) if bits is not None else value
    if hasattr(value, "__dlpack__"):
        return value
    raise type_error(name, "a torch tensor or numpy array", value)


def export_list(name, values):
    if not isinstance(values, (list, tuple)):
        raise type_error(name, "a list of tensors", values)
    return [export(f"{name}[{i}]", v) for i, v in enumerate(values)]


def layer_kwargs(args):
    """The binding's keyword dict: arrays exported, None left out (the C++ defaults apply), every
    other value passed as it is (the binding checks its type and rejects unknown names)."""
    out = {}
    for name, value in args.items():
        if value is None:
            continue
        if isinstance(value, (bytes, bytearray, memoryview)):
            raise type_error(name, "a torch tensor, numpy array or scalar", value)
        out[name] = export(name, value) if is_array(value) else value
    return out


def is_array(value):
    return is_torch(value) or is_numpy(value) or hasattr(value, "__dlpack__")


def arrays_of(kwargs):
    return {k: v for k, v in kwargs.items() if v is not None and is_array(v)}


def to_framework(ref, like):
    """A binding result (ViewRef or None) as a torch tensor (``like == "torch"``) or a numpy array.

    numpy has no bf16 or 8-bit float types: bf16 comes back as uint16 bits, the 8-bit formats as
    uint8 bytes (view them with ml_dtypes if you like). torch gets bfloat16 and float8_e4m3fn.
    """
    if ref is None:
        return None
    if like == "torch":
        import torch

        t = torch.from_dlpack(ref.dlpack(False))
        if ref.dtype == "e4m3":
            t = t.view(torch.float8_e4m3fn)
        return t
    import numpy

    return numpy.from_dlpack(ref.dlpack(True))


def signature(t):
    """(storage address, shape, strides) of a bound array: what a launch's pointers depend on."""
    if is_torch(t):
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()))
    if is_numpy(t):
        return (t.__array_interface__["data"][0], tuple(t.shape), tuple(t.strides))
    return None  # other DLPack producers: nothing to compare


def check_signatures(bound, signatures):
    for name, t in bound.items():
        if signature(t) != signatures[name]:
            raise RuntimeError(f"{name}: tensor storage, shape or stride changed after preparation")


def stream_handle(ref, stream):
    """The cudaStream_t (an int) to enqueue on: ``stream`` (a torch.cuda.Stream or an int
    handle) or, for CUDA torch tensors, torch's current stream of ``ref``'s device; 0 otherwise."""
    if stream is not None:
        handle = getattr(stream, "cuda_stream", stream)
        if isinstance(handle, bool) or not isinstance(handle, int):
            raise type_error("stream", "a torch.cuda.Stream, an int handle or None", stream)
        return handle
    if is_torch(ref) and ref.is_cuda:
        import torch

        return torch.cuda.current_stream(ref.device).cuda_stream
    return 0


def device_context(ref):
    """torch's current device set to ``ref``'s for CUDA torch tensors (the C++ side allocates and
    launches on the current device)."""
    if is_torch(ref) and ref.is_cuda:
        import torch

        return torch.cuda.device(ref.device)
    return contextlib.nullcontext()
