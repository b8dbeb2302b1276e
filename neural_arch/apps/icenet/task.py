"""The sea-ice forecasting task: IceNet-style U-Net on the gridded monthly dataset.

Used through the config: ``run.task: icenet`` (see configs/icenet.yaml);
``neural-arch train --config icenet --create-data``.

- Inputs are normalized per channel with statistics of the training split computed across
  ranks with ``global_mean_std`` (exactly the single-process values), written next to the
  data and kept in checkpoints.
- Loss: class-weighted cross-entropy over active (ocean) cells, one value per sample; the
  class weights come from class frequencies in the training split (summed over ranks).
- Validation: loss plus, per lead month, binary ice accuracy, sea-ice-extent error and
  integrated ice-edge error, for the model and for persistence and climatology baselines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

import neural_arch.distributed as nd
from neural_arch.apps.icenet import metrics as sm
from neural_arch.apps.icenet.config import SECTIONS
from neural_arch.apps.icenet.data import IceNetData, IceNetSpec, check_store, init_store, write_months
from neural_arch.apps.icenet.model import IceNetUNet, ice_probability, masked_weighted_cross_entropy
from neural_arch.export import ExportSpec
from neural_arch.training.task import Task
from neural_arch.training.typed_config import ConfigError

FORECASTERS = ("model", "persistence", "climatology")


def spec_from_config(cfg: Any) -> IceNetSpec:
    """The dataset description the config asks for."""
    data = cfg.data
    return IceNetSpec(
        grid=data.grid, years=data.years, seed=cfg.run.seed, lags=data.lags, leads=data.leads, val_years=data.val_years
    )


def create_data(cfg: Any) -> Path:
    """Create the store at ``data.path`` with every rank writing its share of the months."""
    path, spec = Path(cfg.data.path), spec_from_config(cfg)  # type: ignore[arg-type]
    if nd.get_rank() == 0:
        init_store(path, spec)
    nd.barrier()
    write_months(path, spec, nd.get_rank(), nd.get_world_size())
    nd.barrier()
    return path


def normalization_path(data_path: Path) -> Path:
    """Where the normalization statistics are written: next to the store."""
    return data_path.with_name(data_path.name + ".normalization.json")


class IceNetTask(Task):
    """Data, model, loss and metrics of the sea-ice forecaster."""

    SECTIONS = SECTIONS
    REPORT_ON_EVERY_RANK = True  # report.py runs the model on every rank: a sharded model is never gathered

    @classmethod
    def data_missing(cls, cfg: Any) -> Optional[str]:
        if Path(cfg.data.path).exists():
            # A store is there (maybe the user's own): check all of it now, before any rank starts
            # or anything is written; a bad one is the user's to fix, never recreated over.
            try:
                check_store(cfg.data.path)
            except ValueError as exc:
                raise ConfigError(f"data.path={cfg.data.path!r}: {exc}") from None
            return None
        return (
            f"data.path={cfg.data.path!r}: no IceNet data there; create it with `neural-arch create-data "
            "--config FILE` or add --create-data to the train command"
        )

    @classmethod
    def create_data(cls, cfg: Any) -> Path:
        return create_data(cfg)

    @classmethod
    def build_export(cls, state: dict[str, Any]) -> ExportSpec:
        from neural_arch.apps.icenet.export import build_from_state

        return build_from_state(state)

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.path = Path(cfg.data.path)  # type: ignore[arg-type]
        self.train = IceNetData(self.path, "train")
        self.val = IceNetData(self.path, "val")
        self.train_size, self.val_size = len(self.train), len(self.val)
        self.active = self.train.active_mask
        self.mean = self.std = self.class_weights = torch.empty(0)

    def prepare(self) -> None:
        rank, world = nd.get_rank(), nd.get_world_size()
        mine = self.train.load(list(range(rank, self.train_size, world)))  # each rank reads only its share
        mean, std = nd.global_mean_std(mine["x"].double(), dim=(0, 2, 3))
        self.mean, self.std = mean.float(), torch.where(std > 0, std, torch.ones_like(std)).float()
        classes = mine["target_class"][..., self.active]
        counts = nd.all_reduce(torch.bincount(classes.reshape(-1), minlength=3).double(), check=False)
        weights = counts.sum() / (3 * counts.clamp(min=1))  # inverse frequency, mean 1 when balanced
        self.class_weights = (weights / weights.mean()).float()
        if rank == 0:
            normalization_path(self.path).write_text(
                json.dumps(
                    {"channels": self.train.channels, "mean": self.mean.tolist(), "std": self.std.tolist()}, indent=2
                )
            )

    def build_model(self) -> nn.Module:
        torch.manual_seed(self.cfg.run.seed)
        model = self.cfg.model
        return IceNetUNet(
            len(self.train.channels), leads=self.cfg.data.leads, widths=tuple(model.widths), dropout=model.dropout
        )

    def batch(self, split: str, ids: torch.Tensor, device: torch.device) -> dict[str, torch.Tensor]:
        data = self.train if split == "train" else self.val
        got = data.load(ids.tolist())
        got["x"] = (got["x"] - self.mean[None, :, None, None]) / self.std[None, :, None, None]
        return {k: v.to(device) for k, v in got.items()}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = model(batch["x"]).float()
        return masked_weighted_cross_entropy(
            logits, batch["target_class"], self.active.to(logits.device), self.class_weights.to(logits.device)
        )

    def eval_sums(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = model(batch["x"]).float()
        active = self.active.to(logits.device)
        loss = masked_weighted_cross_entropy(
            logits, batch["target_class"], active, self.class_weights.to(logits.device)
        )
        preds = {
            "model": ice_probability(logits) > 0.5,
            "persistence": sm.sic_to_ice(batch["persistence_sic"]),
            "climatology": sm.sic_to_ice(batch["climatology_sic"]),
        }
        parts = [
            torch.stack(
                [loss.double().sum(), torch.tensor(float(len(loss)), dtype=torch.float64, device=loss.device)]
            ).cpu()
        ]
        for name in FORECASTERS:
            parts.append(
                sm.seaice_sums(preds[name], batch["target_sic"], active, self.train.cell_area_km2).reshape(-1).cpu()
            )
        return torch.cat(parts)

    def finalize(self, sums: torch.Tensor) -> dict[str, float]:
        out = {"val/loss": float(sums[0] / sums[1])}
        leads, fields = self.cfg.data.leads, len(sm.SUM_FIELDS)
        for i, name in enumerate(FORECASTERS):
            chunk = sums[2 + i * leads * fields : 2 + (i + 1) * leads * fields].reshape(leads, fields)
            for metric, values in sm.finalize(chunk).items():
                for lead, value in enumerate(values, start=1):
                    out[f"val/{name}/{metric}/lead{lead}"] = float(value)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "normalization": {"mean": self.mean, "std": self.std, "channels": list(self.train.channels)},
            "class_weights": self.class_weights,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "normalization" in state:
            self.mean, self.std = state["normalization"]["mean"], state["normalization"]["std"]
            self.class_weights = state["class_weights"]

    def summary_metrics(self, final: dict[str, float]) -> dict[str, float]:
        # The baselines' metrics are in metrics.jsonl and report.md; the summary shows the model's.
        return {k: v for k, v in final.items() if not k.startswith(("val/persistence/", "val/climatology/"))}

    def report(self, run_dir: Path, model: nn.Module, final: dict[str, float], throughput: dict[str, float]) -> None:
        from neural_arch.apps.icenet.report import write_report

        write_report(run_dir, self, model, final, throughput)
