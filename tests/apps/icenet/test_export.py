"""TorchScript export: parity with eager, a wrong export is caught, checkpoints, and C++ parity.

Run: ``.venv/bin/python -m pytest tests/test_export.py -q``

The C++ test builds cpp/ against the torch wheel's LibTorch (about 15-35 s on 2 cores, once
per session) and skips only when no C++ compiler or cmake is installed.
"""

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from neural_arch import export
from neural_arch.apps.icenet.model import IceNetUNet
from neural_arch.distributed.checkpoint import save_checkpoint
from neural_arch.export import (
    export_checkpoint,
    export_torchscript,
    normalization,
    parse_infer_output,
    read_tensor_file,
    write_tensor_file,
)

# Why: the tests reload files with torch.jit.load on purpose (what the C++ side does); torch
# 2.13 deprecates it, export.py silences its own calls, these are the tests' own.
pytestmark = pytest.mark.filterwarnings(r"ignore:`torch\.jit\.load` is deprecated:DeprecationWarning")

CHANNELS, LEADS, CLASSES = 4, 2, 3
CONFIG = {"in_channels": CHANNELS, "leads": LEADS, "widths": [4, 8], "classes": CLASSES}
MEAN = torch.tensor([1.0, -2.0, 0.5, 10.0])
STD = torch.tensor([2.0, 0.5, 1.0, 4.0])


def small_model(seed: int = 0) -> IceNetUNet:
    torch.manual_seed(seed)
    return IceNetUNet(**CONFIG)


def raw_input(n: int = 2, h: int = 9, w: int = 10, seed: int = 1) -> torch.Tensor:
    """Raw (unnormalized) fields around MEAN/STD; odd H, W exercise the U-Net's padding."""
    g = torch.Generator().manual_seed(seed)
    return MEAN[None, :, None, None] + STD[None, :, None, None] * torch.randn(n, CHANNELS, h, w, generator=g)


def reference(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What the exported file must compute, written out independently of export.py."""
    with torch.no_grad():
        z = (x - MEAN.view(1, -1, 1, 1)) / STD.view(1, -1, 1, 1)
        return torch.softmax(model.eval()(z), dim=2)


def test_export_matches_eager_and_independent_reference(tmp_path):
    model, x = small_model(), raw_input()
    out = tmp_path / "icenet.ts"
    diff = export_torchscript(model, MEAN, STD, out, x)
    assert diff <= 1e-5
    with torch.no_grad():
        # A different batch size and grid than the example: the file is not shape-specialized.
        for probe in (x, raw_input(n=1, h=7, w=12, seed=2)):
            got = torch.jit.load(str(out))(probe)
            assert got.shape == (probe.shape[0], LEADS, CLASSES, *probe.shape[2:])
            torch.testing.assert_close(got, reference(model, probe), atol=1e-5, rtol=0)
            torch.testing.assert_close(got.sum(dim=2), torch.ones_like(got[:, :, 0]), atol=1e-5, rtol=0)
    assert [p.name for p in tmp_path.iterdir()] == ["icenet.ts"]  # no .tmp-* left behind


def test_wrong_export_is_caught_and_keeps_the_previous_file(tmp_path, monkeypatch):
    model, x = small_model(), raw_input()
    out = tmp_path / "icenet.ts"
    out.write_bytes(b"previous good export")
    real_script = export.script_module

    def corrupted(*args):
        scripted = real_script(*args)
        scripted.mean = scripted.mean + 0.5  # only the scripted copy: eager still uses MEAN
        return scripted

    monkeypatch.setattr(export, "script_module", corrupted)
    with pytest.raises(ValueError, match=r"TorchScript output differs from eager by .* > atol"):
        export_torchscript(model, MEAN, STD, out, x)
    assert out.read_bytes() == b"previous good export"
    assert [p.name for p in tmp_path.iterdir()] == ["icenet.ts"]


@pytest.mark.parametrize(
    "mean, std, x, match",
    [
        (MEAN[:3], STD[:3], None, "example has shape"),
        (MEAN, STD[:2], None, "same length"),
        (MEAN, torch.tensor([1.0, 0.0, 1.0, 1.0]), None, "std finite and > 0"),
        (MEAN, STD, torch.zeros(2, CHANNELS, 8), "example has shape"),
    ],
)
def test_bad_statistics_or_example_raise(tmp_path, mean, std, x, match):
    with pytest.raises(ValueError, match=match):
        export_torchscript(small_model(), mean, std, tmp_path / "m.ts", raw_input() if x is None else x)
    assert not any(tmp_path.iterdir())


def build_icenet(state: dict):
    """A ``build_model`` callback as an application would write it."""
    model = IceNetUNet(**state["config"])
    model.load_state_dict(state["model"])
    mean, std = normalization(state)
    return model, mean, std, raw_input(n=1)


def test_export_checkpoint_round_trip_and_missing(tmp_path):
    model = small_model(seed=3)
    state = {"model": model.state_dict(), "config": CONFIG, "normalization": {"mean": MEAN, "std": STD}}
    save_checkpoint(tmp_path / "ckpt", 5, state)
    out = tmp_path / "icenet.ts"
    assert export_checkpoint(tmp_path / "ckpt", out, build_icenet) <= 1e-5
    x = raw_input(seed=4)
    torch.testing.assert_close(torch.jit.load(str(out))(x).detach(), reference(model, x), atol=1e-5, rtol=0)

    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no checkpoint found"):
        export_checkpoint(tmp_path / "empty", out, build_icenet)
    with pytest.raises(ValueError, match="does not exist"):
        export_checkpoint(tmp_path / "nowhere", out, build_icenet)
    with pytest.raises(ValueError, match="no normalization"):
        normalization({"model": {}, "config": CONFIG})
    # Where the trainer keeps it (Trainer.state()["task"], see training/task_icenet.py).
    nested = normalization({"task": {"normalization": {"mean": MEAN.double(), "std": STD.tolist()}}})
    assert all(t.dtype == torch.float32 for t in nested) and torch.equal(nested[0], MEAN)


def test_tensor_file_round_trip_and_damage(tmp_path):
    x = raw_input(n=1, h=3, w=5)
    write_tensor_file(x, tmp_path / "x.bin")
    raw = (tmp_path / "x.bin").read_bytes()
    assert len(raw) == 8 * 5 + 4 * x.numel() and raw[:8] == (4).to_bytes(8, "little")
    assert torch.equal(read_tensor_file(tmp_path / "x.bin"), x)
    (tmp_path / "short.bin").write_bytes(raw[:-4])
    with pytest.raises(ValueError, match="needs"):
        read_tensor_file(tmp_path / "short.bin")
    assert torch.equal(parse_infer_output("shape 2 1\n1.5e+00\n-2.0e+00\n"), torch.tensor([[1.5], [-2.0]]))
    with pytest.raises(ValueError, match="truncated"):
        parse_infer_output("shape 2 2\n1.0\n")


# ---- C++ (LibTorch) parity --------------------------------------------------------------


def _missing_toolchain() -> str:
    if shutil.which("cmake") is None:
        return "cmake is not installed (apt-get install cmake)"
    if shutil.which("c++") is None and shutil.which("g++") is None:
        return "no C++ compiler (c++ or g++) is installed (apt-get install g++)"
    return ""


@pytest.fixture(scope="session")
def icenet_infer(tmp_path_factory):
    """Path of cpp/'s icenet_infer, built once per session against the torch wheel's LibTorch."""
    if _missing_toolchain():
        pytest.skip(_missing_toolchain())
    source = str(Path(export.__file__).resolve().parents[1] / "cpp")
    build = tmp_path_factory.mktemp("icenet_infer_build")
    commands = [
        [
            "cmake",
            "-S",
            source,
            "-B",
            str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
        ],
        ["cmake", "--build", str(build), "-j2"],
    ]
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return build / "icenet_infer"


@pytest.mark.multiprocess
def test_cpp_inference_matches_python(tmp_path, icenet_infer):
    model, x = small_model(seed=5), raw_input(n=2, h=9, w=10, seed=6)
    export_torchscript(model, MEAN, STD, tmp_path / "icenet.ts", x)
    write_tensor_file(x, tmp_path / "x.bin")
    with torch.no_grad():
        expected = torch.jit.load(str(tmp_path / "icenet.ts"))(x)

    printed = subprocess.run(
        [str(icenet_infer), str(tmp_path / "icenet.ts"), str(tmp_path / "x.bin")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    got = parse_infer_output(printed.stdout)
    assert got.shape == (2, LEADS, CLASSES, 9, 10)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)

    written = subprocess.run(
        [str(icenet_infer), str(tmp_path / "icenet.ts"), str(tmp_path / "x.bin"), str(tmp_path / "y.bin")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert written.returncode == 0, written.stderr
    assert written.stdout == "shape 2 2 3 9 10\n"
    torch.testing.assert_close(read_tensor_file(tmp_path / "y.bin"), expected, atol=1e-5, rtol=0)


@pytest.mark.multiprocess
def test_cpp_reports_bad_input_and_usage(tmp_path, icenet_infer):
    export_torchscript(small_model(), MEAN, STD, tmp_path / "icenet.ts", raw_input())
    write_tensor_file(torch.zeros(1, CHANNELS + 1, 4, 4), tmp_path / "wrong.bin")
    run = subprocess.run(
        [str(icenet_infer), str(tmp_path / "icenet.ts"), str(tmp_path / "wrong.bin")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and "expected raw input [n, 4, H, W]" in run.stderr
    swapped = subprocess.run(
        [str(icenet_infer), str(tmp_path / "wrong.bin"), str(tmp_path / "icenet.ts")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert swapped.returncode == 1 and "as a TorchScript model" in swapped.stderr
    usage = subprocess.run([str(icenet_infer)], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "usage:" in usage.stderr
