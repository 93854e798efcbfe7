"""Where a training run's results and weights live, and how they are written and read back: the
JSON result and the weights file of a run (atomic writes; a corrupt, truncated or foreign file
is refused with the reason, never read as another run's).  :func:`.runs.load_model`
rebuilds a trained model from them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..._internal.validation import fail
from .config import RESULT_VERSION, ExperimentConfig, _config
from .data import model_config

log = logging.getLogger(__name__)


def result_path(cfg: ExperimentConfig, artifacts_dir: str | Path) -> Path:
    """Where the run's JSON lives: ``<artifacts_dir>/task_routing/<key>.json``."""
    _config(cfg)
    if not (isinstance(artifacts_dir, (str, os.PathLike)) and os.fspath(artifacts_dir)):
        fail("artifacts_dir", artifacts_dir, "a folder path")
    return Path(artifacts_dir) / "task_routing" / f"{cfg.key()}.json"


#: version of the weights file's layout (a file of another version is refused, not guessed at)
WEIGHTS_FORMAT = 1


def weights_path(cfg: ExperimentConfig, artifacts_dir: str | Path) -> Path:
    """Where the run's trained weights live: ``<artifacts_dir>/task_routing_weights/<key>.pt``
    (the key of :func:`result_path`'s JSON)."""
    path = result_path(cfg, artifacts_dir)
    return path.parent.parent / "task_routing_weights" / f"{path.stem}.pt"


def _save_weights(cfg: ExperimentConfig, model, artifacts_dir: str | Path) -> Path:
    """torch.save of the model's state (on the CPU), through a temporary file renamed over the
    target (:func:`moe_routing._internal.atomic.atomic_write_bytes`).  The knock-out modes are Python
    attributes, not state: they are stored too, so that the ``collapsed`` variant's model (its
    routing collapsed after training) reloads as the model that was measured."""
    import io

    import torch

    from ..._internal.atomic import atomic_write_bytes

    payload = dict(format=WEIGHTS_FORMAT, key=cfg.key(), training_key=cfg.training_key(),
                   model_config=model.config.as_dict(),
                   knockout_modes=[layer.knockout_mode for layer in model.layers()],
                   state_dict={k: v.detach().cpu() for k, v in model.state_dict().items()})
    buf = io.BytesIO()
    torch.save(payload, buf)
    path = weights_path(cfg, artifacts_dir)
    atomic_write_bytes(path, buf.getvalue())
    return path


def _read_weights(cfg: ExperimentConfig, path: Path):
    """The model stored at ``path`` for ``cfg``; ValueError naming the file when it is
    unreadable, of another format, of another run or of another shape."""
    import io

    import torch

    from ...model import MoEConfig, MoETransformer

    def refuse(why: str):
        raise ValueError(f"weights file {path} {why}; delete it to have load_model recompute "
                         "the weights, or re-run the experiment")

    try:
        payload = torch.load(io.BytesIO(path.read_bytes()), map_location="cpu",
                             weights_only=True)
    except Exception as e:                       # torch raises many types for a bad file
        refuse(f"is unreadable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    if not isinstance(payload, dict) or payload.get("format") != WEIGHTS_FORMAT:
        refuse(f"is not a weights file of format {WEIGHTS_FORMAT}")
    if payload.get("key") != cfg.key() or payload.get("training_key") != cfg.training_key():
        refuse(f"holds the weights of run {payload.get('key')!r}, not of {cfg.key()!r}")
    expected = model_config(cfg)
    try:
        stored = MoEConfig(**payload["model_config"])
    except (KeyError, TypeError, ValueError) as e:
        refuse(f"holds no valid model configuration ({type(e).__name__}: {e})")
    if stored != expected:
        diff = {k: (v, getattr(expected, k)) for k, v in stored.as_dict().items()
                if v != getattr(expected, k)}
        refuse(f"was built with another model configuration (stored, expected: {diff})")
    model = MoETransformer(expected)
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except (KeyError, TypeError, RuntimeError) as e:
        refuse(f"does not fit the model ({type(e).__name__}: {str(e).splitlines()[0]})")
    modes = payload.get("knockout_modes")
    if not (isinstance(modes, list) and len(modes) == len(model.layers())
            and all(m in ("zero", "reroute") for m in modes)):
        refuse("holds no valid knock-out modes")
    for layer, mode in zip(model.layers(), modes):
        layer.knockout_mode = mode
    return model.eval()


#: what a cached result must hold to be used (a file lacking any of them is re-run)
RESULT_KEYS = ("version", "key", "config", "training_key", "accuracy", "train_accuracy",
               "accuracy_experts_off", "valid_mass", "valid_mass_object", "routing_all", "routing_object",
               "routing_determined", "params",
               "steps", "wall_s")


def _read_cached(cfg: ExperimentConfig, folder: str | Path) -> tuple[dict | None, str | None]:
    """(result, None) when ``folder`` holds a usable result of ``cfg``; (None, None) when it
    holds none (absent, or of another format version); (None, why) when the file is there but
    corrupt, truncated or not a result of ``cfg`` -- such a file is never read as a result
    (:func:`moe_routing.experiments.grid.cache.read_cached`)."""
    from ..grid.cache import read_cached

    return read_cached(result_path(cfg, folder), version=RESULT_VERSION, required=RESULT_KEYS,
                       key=cfg.key(), training_key=cfg.training_key())


def load_result(cfg: ExperimentConfig, artifacts_dir: str | Path | None) -> dict | None:
    """The cached result of ``cfg`` (None when absent or written by another format version).

    A corrupt or truncated file is never read: it gives None, and one warning line names it."""
    from ..grid.cache import load_cached

    _config(cfg)
    if artifacts_dir is None:
        return None
    return load_cached(result_path(cfg, artifacts_dir), version=RESULT_VERSION,
                       required=RESULT_KEYS, key=cfg.key(), training_key=cfg.training_key(),
                       log=log, label="task_routing")


def _copy_weights(cfg: ExperimentConfig, source: str | Path, target: str | Path) -> None:
    """Copy the run's weights file along with its JSON, when the source folder has one (the
    bytes as they are: :func:`~moe_routing.experiments.task_routing.runs.load_model` checks them
    where they are read)."""
    from ..._internal.atomic import atomic_write_bytes

    src = weights_path(cfg, source)
    if src.exists():
        atomic_write_bytes(weights_path(cfg, target), src.read_bytes())
