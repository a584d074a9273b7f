"""The package's exception and warning classes beyond those of the extension module."""

import warnings

from ._cakemoe import ArgumentTypeError, InvalidArgument, Unsupported


class ExperimentalWarning(UserWarning):
    """The StepFun backend (``cake_stepfun``) is experimental; emitted once per process."""


class UnsupportedPath(Unsupported, NotImplementedError):
    """``CAKEMOE_STEPFUN_FULL_PATH=0`` asked for the FC1-only hybrid path, which cakemoe does not
    have (an ``Unsupported``, hence a ``ValueError``, and a ``NotImplementedError``)."""


def make_error(cls, argument, rule):
    """An instance of a cakemoe error class with its ``argument`` and ``rule`` attributes."""
    error = cls(f"{argument}: {rule}")
    error.argument = argument
    error.rule = rule
    return error


def type_error(argument, expected, value):
    rule = f"must be {expected}, got {type(value).__name__}"
    return make_error(ArgumentTypeError, argument, rule)


def invalid(argument, rule):
    return make_error(InvalidArgument, argument, rule)


_experimental_warned = False


def warn_experimental(stacklevel=3):
    """Emits the ExperimentalWarning the first time the StepFun backend is named in a process."""
    global _experimental_warned
    if _experimental_warned:
        return
    _experimental_warned = True
    warnings.warn(
        "cakemoe's StepFun backend (cake_stepfun) is experimental: its API and numerics may "
        "change between releases",
        ExperimentalWarning,
        stacklevel=stacklevel,
    )
