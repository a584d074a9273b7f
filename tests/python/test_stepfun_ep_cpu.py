"""cakemoe.stepfun_ep without a GPU: the module and its re-exports, available(), and the typed
errors of the checks that run before any device or NCCL call (unique id length, rank and world
size, device, comm that is not a communicator, unknown scheme, unknown keywords). Builds without
NCCL also raise Unsupported naming the argument once the checks pass."""

import numpy as np
import pytest

import cakemoe
from cakemoe import stepfun_ep
from cakemoe._errors import invalid

pytestmark = pytest.mark.filterwarnings("ignore::cakemoe.ExperimentalWarning")

ID = bytes(range(stepfun_ep.UNIQUE_ID_BYTES))


def expect_error(cls, argument, fn, *args, **kwargs):
    with pytest.raises(cls) as info:
        fn(*args, **kwargs)
    assert info.value.argument == argument, str(info.value)
    assert "Invalid types" not in str(info.value)  # never a nanobind signature dump
    return info.value


def test_module_and_reexports():
    assert cakemoe.stepfun_ep is stepfun_ep
    for name in ("Communicator", "EpLaunch", "EpSizes", "prepare_ep"):
        assert getattr(cakemoe, name) is getattr(stepfun_ep, name)
        assert name in cakemoe.__all__
    assert set(stepfun_ep.__all__) <= set(dir(stepfun_ep))
    assert stepfun_ep.UNIQUE_ID_BYTES == 128


def test_available_is_a_bool_and_false_without_nccl():
    assert isinstance(stepfun_ep.available(), bool)
    if not cakemoe.with_cuda:
        assert stepfun_ep.available() is False


@pytest.mark.parametrize("length", [0, 1, 127, 129])
def test_unique_id_of_the_wrong_length(length):
    expect_error(cakemoe.InvalidArgument, "unique_id", stepfun_ep.Communicator.from_unique_id,
                 bytes(length), rank=0, world_size=1, device=0)


@pytest.mark.parametrize("value", ["ab" * 64, list(range(128)), None, bytearray(128)])
def test_unique_id_that_is_not_bytes(value):
    expect_error(cakemoe.ArgumentTypeError, "unique_id", stepfun_ep.Communicator.from_unique_id,
                 value, rank=0, world_size=1, device=0)


@pytest.mark.parametrize("rank, world_size", [(-1, 2), (2, 2), (1, 1), (5, 4)])
def test_rank_out_of_range(rank, world_size):
    e = expect_error(cakemoe.InvalidArgument, "rank", stepfun_ep.Communicator.from_unique_id,
                     ID, rank=rank, world_size=world_size, device=0)
    assert str(world_size) in e.rule


@pytest.mark.parametrize("world_size", [0, -3])
def test_world_size_below_one(world_size):
    expect_error(cakemoe.InvalidArgument, "world_size", stepfun_ep.Communicator.from_unique_id,
                 ID, rank=0, world_size=world_size, device=0)


@pytest.mark.parametrize("name, value", [("rank", 0.0), ("rank", True), ("rank", "0"),
                                         ("world_size", 2.5), ("world_size", None)])
def test_rank_and_world_size_must_be_ints(name, value):
    kwargs = dict(rank=0, world_size=1, device=0)
    kwargs[name] = value
    expect_error(cakemoe.ArgumentTypeError, name, stepfun_ep.Communicator.from_unique_id, ID,
                 **kwargs)


def test_rank_beyond_int32():
    expect_error(cakemoe.InvalidArgument, "rank", stepfun_ep.Communicator.from_unique_id, ID,
                 rank=2**40, world_size=1, device=0)


@pytest.mark.parametrize("device, cls", [(-1, cakemoe.InvalidArgument),
                                         ("cpu", cakemoe.InvalidArgument),
                                         ("cuda:x", cakemoe.InvalidArgument),
                                         (1.0, cakemoe.ArgumentTypeError),
                                         (True, cakemoe.ArgumentTypeError)])
def test_bad_device(device, cls):
    expect_error(cls, "device", stepfun_ep.Communicator.from_unique_id, ID, rank=0,
                 world_size=1, device=device)


def test_builds_without_nccl_raise_unsupported_after_the_checks():
    if stepfun_ep.available():
        pytest.skip("this build has NCCL: the GPU tests make communicators")
    expect_error(cakemoe.Unsupported, "unique_id", stepfun_ep.new_unique_id)
    expect_error(cakemoe.Unsupported, "unique_id", stepfun_ep.Communicator.from_unique_id, ID,
                 rank=0, world_size=1)
    expect_error(cakemoe.Unsupported, "unique_id", stepfun_ep.Communicator.from_unique_id, ID,
                 rank=1, world_size=2, device="cuda:1")


def layer_kwargs():
    """A small valid-looking bf16 layer (numpy): prepare_ep never gets as far as reading it."""
    t, h, i, e, k = 4, 64, 32, 4, 2
    return dict(family="bf16", hidden_states=np.zeros((t, h), np.uint16),
                gemm1_weights=np.zeros((e, 2 * i, h), np.uint16),
                gemm2_weights=np.zeros((e, h, i), np.uint16),
                gemm1_clamp_limit=np.full(e, 7.0, np.float32),
                routing_logits=np.zeros((t, e), np.float32), num_experts=e, top_k=k)


@pytest.mark.parametrize("comm", [None, 0, "nccl", object(), np.zeros(1)])
def test_comm_that_is_not_a_communicator(comm):
    e = expect_error(cakemoe.ArgumentTypeError, "comm", stepfun_ep.prepare_ep, comm,
                     **layer_kwargs())
    assert "Communicator" in e.rule


@pytest.mark.parametrize("scheme, cls", [("all2all", cakemoe.InvalidArgument),
                                         ("", cakemoe.InvalidArgument),
                                         (0, cakemoe.ArgumentTypeError),
                                         (None, cakemoe.ArgumentTypeError)])
def test_unknown_scheme(scheme, cls):
    expect_error(cls, "scheme", stepfun_ep.prepare_ep, None, scheme=scheme, **layer_kwargs())


def test_stream_is_an_argument_of_launch_not_of_prepare():
    expect_error(cakemoe.ArgumentTypeError, "stream", stepfun_ep.prepare_ep, None, stream=0,
                 **layer_kwargs())


def test_sizes_dataclass_is_frozen():
    s = stepfun_ep.EpSizes(world_size=2, rank=1, num_tokens=3, rows_per_peer=4, layer_rows=8,
                           dispatch_row_bytes=10, combine_row_bytes=12, dispatch_wire_bytes=40,
                           combine_wire_bytes=48)
    assert s.layer_rows == 8
    with pytest.raises(AttributeError):
        s.rank = 0


def test_from_process_group_without_nccl_or_without_init():
    pytest.importorskip("torch")
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("this torch has no torch.distributed")
    if not stepfun_ep.available():
        expect_error(cakemoe.Unsupported, "group", stepfun_ep.Communicator.from_process_group)
    elif not dist.is_initialized():
        expect_error(cakemoe.InvalidArgument, "group", stepfun_ep.Communicator.from_process_group)


def test_group_bootstrap_agrees_on_rank_0s_id_or_every_rank_raises():
    # What from_process_group does with the gathered statuses (one per rank of the group).
    agreed = stepfun_ep._agreed_unique_id
    ok = [{"device": 0, "unique_id": ID}, {"device": 1}, {"device": 0}]
    assert agreed(ok, None) == ID
    failed = [{"device": 0, "unique_id": ID}, {"error": "InvalidArgument: device: bad"},
              {"device": 1}]
    e = expect_error(cakemoe.InvalidArgument, "group", agreed, failed, None)
    assert "rank 1" in e.rule and "device: bad" in e.rule
    own = invalid("device", "is not a CUDA device")
    assert expect_error(cakemoe.InvalidArgument, "device", agreed, failed, own) is own
