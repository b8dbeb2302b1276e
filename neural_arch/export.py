"""Export a trained model to TorchScript for C++ (LibTorch) inference, with a parity check.

Run (from Python; ``build`` turns a checkpoint's state into an ``ExportSpec``, or into
``(model, mean, std, example)`` for a normalized forecaster)::

    from neural_arch.export import export_checkpoint, export_module, export_torchscript
    diff = export_torchscript(model, mean, std, "model.ts", example)   # max |script - eager|
    diff = export_module(any_module, example, "model.ts")              # any scriptable module
    diff = export_checkpoint("run/checkpoints", "model.ts", build)

or ``neural-arch export --checkpoint DIR --output model.ts`` (the task's ``build_export``
supplies ``build``), then run it from C++ with the LibTorch program in ``cpp/`` (see
cpp/README.md), with the input written by ``write_tensor_file(x, "input.bin")``.

A forecaster exported by ``export_torchscript`` takes *raw* float32 fields ``[n, C, H, W]``
and returns class probabilities ``[n, leads, classes, H, W]``: normalization and softmax
travel inside the file, so the C++ side cannot apply the wrong statistics. Every export is
reloaded from disk and compared with the eager module before it replaces ``output``, so a
bad export never overwrites a good one.

Tensor file format (shared with the C++ program in cpp/; all little-endian): int64 ``ndim``,
``ndim`` x int64 dims, then ``prod(dims)`` float32 values in C (row-major) order.
"""

from __future__ import annotations

import struct
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Union

import numpy as np
import torch
from torch import Tensor, nn

from neural_arch.distributed.checkpoint import load_checkpoint, with_whole_model
from neural_arch.utils.atomic import commit_file

PathLike = Union[str, Path]


@dataclass
class ExportSpec:
    """What an export writes: a module TorchScript can compile, and an input to check it on."""

    module: nn.Module
    """The whole exported computation (put into eval mode); its ``forward`` takes one tensor."""
    example: Tensor
    """An input for the parity check: the file's output on it must equal the eager module's."""
    atol: float = 1e-5
    """Largest accepted |file - eager| on ``example``."""


BuildModel = Callable[[dict], Union[ExportSpec, tuple[nn.Module, Tensor, Tensor, Tensor]]]
_MAX_NDIM = 8  # the C++ reader's limit too; a larger value means the file is not ours


class NormalizedForecaster(nn.Module):
    """``forward(x_raw [n, C, H, W]) -> softmax(model((x_raw - mean) / std), dim=2)``.

    ``model`` returns logits ``[n, leads, classes, H, W]``; ``mean``/``std`` (``[C]``) are
    float32 buffers, so they are saved in the TorchScript file with the weights.
    """

    def __init__(self, model: nn.Module, mean: Tensor, std: Tensor) -> None:
        super().__init__()
        mean, std = _check_stats(mean, std)
        self.model = model
        # Why clone: the file must not change if the caller later edits its statistics.
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", std.clone())

    def forward(self, x: Tensor) -> Tensor:
        # Why check here: this runs in C++ too, where a wrong channel count would otherwise
        # be a broadcasting error deep inside the model.
        if x.dim() != 4 or x.size(1) != self.mean.numel():
            raise ValueError(f"expected raw input [n, {self.mean.numel()}, H, W] (float32), got shape {x.shape}")
        z = (x - self.mean[None, :, None, None]) / self.std[None, :, None, None]
        return torch.softmax(self.model(z), dim=2)


def script_forecaster(model: nn.Module, mean: Tensor, std: Tensor) -> torch.jit.ScriptModule:
    """``torch.jit.script(NormalizedForecaster(model.eval(), mean, std))``; ValueError if unscriptable."""
    return script_module(NormalizedForecaster(model.eval(), mean, std), name=type(model).__name__)


def script_module(module: nn.Module, name: str = "") -> torch.jit.ScriptModule:
    """``torch.jit.script(module.eval())``; ValueError naming the module if it cannot be compiled."""
    try:
        with _torchscript_on_purpose():
            return torch.jit.script(module.eval())
    except Exception as exc:  # noqa: BLE001 - TorchScript raises many types; all mean the same here
        raise ValueError(
            f"{name or type(module).__name__} cannot be compiled by torch.jit.script ({exc}); give forward() type "
            "annotations and avoid Python-only constructs (see the TorchScript language reference)."
        ) from exc


def export_torchscript(
    model: nn.Module, mean: Tensor, std: Tensor, output: PathLike, example: Tensor, atol: float = 1e-5
) -> float:
    """Script ``NormalizedForecaster(model.eval(), mean, std)`` to ``output``; return max |file - eager|.

    ``model`` is left in eval mode. The file is written under a ``.tmp-*`` name, reloaded
    with ``torch.jit.load`` and run on ``example`` (raw ``[n, C, H, W]``); only if it matches
    the eager wrapper within ``atol`` is it renamed to ``output`` (atomically). Otherwise
    ``ValueError`` and ``output`` is untouched.
    """
    example = torch.as_tensor(example, dtype=torch.float32)
    mean, std = _check_stats(mean, std)
    if example.dim() != 4 or example.size(1) != mean.numel():
        raise ValueError(
            f"example has shape {tuple(example.shape)}; expected raw input [n, {mean.numel()}, H, W] "
            f"matching the {mean.numel()} normalization channels"
        )
    return export_module(
        NormalizedForecaster(model.eval(), mean, std), example, output, atol, name=type(model).__name__
    )


def export_module(module: nn.Module, example: Tensor, output: PathLike, atol: float = 1e-5, name: str = "") -> float:
    """Script ``module`` (left in eval mode) to ``output``; return max |file - eager| on ``example``.

    The file is written under a ``.tmp-*`` name, reloaded with ``torch.jit.load`` and run on
    ``example``; only if it matches the eager module within ``atol`` is it renamed to
    ``output`` (atomically). Otherwise ``ValueError`` and ``output`` is untouched.
    """
    output = Path(output)
    # Why eager first: scripting may share tensors with the eager module, so the reference
    # is taken before anything could touch them.
    with torch.no_grad():
        expected = module.eval()(example)
    scripted = script_module(module, name)
    diffs: list[float] = []

    def check(staged: Path) -> None:  # runs on the staged file, before it may replace `output`
        with _torchscript_on_purpose(), torch.no_grad():
            got = torch.jit.load(str(staged), map_location="cpu")(example)
        diffs.append(_max_abs_diff(got, expected))
        if not diffs[0] <= atol:  # `not <=` so that NaN fails too
            raise ValueError(
                f"TorchScript output differs from eager by {diffs[0]:.3e} > atol={atol:.1e}; {output} was not "
                "written. Look for Python-side state the script cannot see (globals, hooks, train mode)."
            )

    output.parent.mkdir(parents=True, exist_ok=True)
    with _torchscript_on_purpose():
        commit_file(output, lambda f: torch.jit.save(scripted, f), check=check)
    return diffs[0]


def export_checkpoint(checkpoint: PathLike, output: PathLike, build_model: BuildModel) -> float:
    """Export the newest usable checkpoint under ``checkpoint`` (a run dir or one ``step_*`` dir).

    ``build_model(state)`` gets the loaded state (``"model"``, ``"config"``, ``"task"``) and
    returns an ``ExportSpec``, or ``(model with weights loaded, mean, std, example raw
    input)`` for a normalized forecaster (``normalization(state)`` reads the statistics).
    Returns the parity check's max abs diff.
    """
    path = Path(checkpoint)
    if not path.exists():
        raise ValueError(f"checkpoint {path} does not exist; pass a run's checkpoint directory or a step_* in it.")
    found = load_checkpoint(path)
    if found is None:
        raise ValueError(f"no checkpoint found in {path} (no step_* directories); train first or fix the path.")
    info, state = found
    built = build_model(with_whole_model(info.path, state))
    if isinstance(built, ExportSpec):
        return export_module(built.module, built.example, output, built.atol)
    model, mean, std, example = built
    return export_torchscript(model, mean, std, output, example)


def normalization(state: dict[str, Any]) -> tuple[Tensor, Tensor]:
    """``(mean, std)`` from a checkpoint state's ``"normalization"`` entry, with a clear error.

    Looks at ``state["normalization"]`` and at ``state["task"]["normalization"]`` (where the
    trainer keeps a task's state, e.g. the sea-ice task's statistics).
    """
    stats = None
    if isinstance(state, dict):
        task = state.get("task")
        stats = state.get("normalization", task.get("normalization") if isinstance(task, dict) else None)
    if not isinstance(stats, dict) or "mean" not in stats or "std" not in stats:
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ValueError(
            f"checkpoint state has no normalization {{'mean': ..., 'std': ...}} at the top or under "
            f"'task' (found keys {keys}); "
            "the trainer must save the per-channel statistics it normalized with."
        )
    return _check_stats(stats["mean"], stats["std"])


def write_tensor_file(x: Tensor, path: PathLike) -> None:
    """Write ``x`` as float32 in the tensor file format (header of its shape, then the data)."""
    data = np.ascontiguousarray(torch.as_tensor(x).detach().cpu().to(torch.float32).numpy(), dtype="<f4")
    if not 1 <= data.ndim <= _MAX_NDIM:
        raise ValueError(f"tensor has {data.ndim} dims; the file format takes 1 to {_MAX_NDIM}.")
    header = struct.pack(f"<q{data.ndim}q", data.ndim, *data.shape)
    Path(path).write_bytes(header + data.tobytes())


def read_tensor_file(path: PathLike) -> Tensor:
    """Read a tensor file (as written by ``write_tensor_file`` or the C++ program's ``OUTPUT.bin``)."""
    raw = Path(path).read_bytes()
    ndim = struct.unpack_from("<q", raw)[0] if len(raw) >= 8 else -1
    if not 1 <= ndim <= _MAX_NDIM:
        raise ValueError(f"{path} is not a tensor file: header says {ndim} dims, expected 1 to {_MAX_NDIM}.")
    shape = struct.unpack_from(f"<{ndim}q", raw, 8)
    offset = 8 * (1 + ndim)
    expected = offset + 4 * int(np.prod(shape))
    if min(shape) < 0 or len(raw) != expected:
        raise ValueError(f"{path} has {len(raw)} bytes; a float32 tensor of shape {shape} needs {expected}.")
    return torch.from_numpy(np.frombuffer(raw, dtype="<f4", offset=offset).astype(np.float32).reshape(shape))


def parse_infer_output(text: str) -> Tensor:
    """The tensor the C++ program in cpp/ printed: a ``shape d0 d1 ...`` line, then one value per line."""
    lines = text.split("\n")
    first = lines[0].split()
    if not first or first[0] != "shape":
        raise ValueError(f"the C++ program's output must start with a 'shape ...' line, got {lines[0][:80]!r}.")
    shape = tuple(int(d) for d in first[1:])
    values = [float(v) for v in lines[1:] if v.strip()]
    if len(values) != int(np.prod(shape)):
        raise ValueError(f"the C++ program printed {len(values)} values for shape {shape}; the output is truncated.")
    return torch.tensor(values, dtype=torch.float32).reshape(shape)


@contextmanager
def _torchscript_on_purpose() -> Iterator[None]:
    # Why silence: torch 2.13 marks torch.jit.script/save/load deprecated, but a TorchScript
    # file is what LibTorch's torch::jit::load reads with no compiler at export time; the
    # warning would fire on every export and tell the user nothing they can act on.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`torch\.jit\.\w+` is deprecated", DeprecationWarning)
        yield


def _check_stats(mean: Any, std: Any) -> tuple[Tensor, Tensor]:
    mean = torch.as_tensor(mean).detach().cpu().to(torch.float32)
    std = torch.as_tensor(std).detach().cpu().to(torch.float32)
    if mean.dim() != 1 or std.shape != mean.shape or mean.numel() == 0:
        raise ValueError(
            f"mean and std must be 1-D per-channel vectors of the same length, got shapes "
            f"{tuple(mean.shape)} and {tuple(std.shape)}."
        )
    if not (torch.isfinite(mean).all() and torch.isfinite(std).all() and (std > 0).all()):
        raise ValueError(f"mean must be finite and std finite and > 0, got mean={mean.tolist()} std={std.tolist()}.")
    return mean, std


def _max_abs_diff(got: Any, expected: Tensor) -> float:
    if not isinstance(got, Tensor) or got.shape != expected.shape:
        shape = tuple(got.shape) if isinstance(got, Tensor) else type(got).__name__
        raise ValueError(f"TorchScript output has shape {shape}, eager {tuple(expected.shape)}; the export is wrong.")
    return float((got.double() - expected.double()).abs().max()) if got.numel() else 0.0
