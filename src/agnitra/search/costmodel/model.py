"""The cost model: LightGBM over `Featurizer` features, one model per target.

- speed: the log speedup over the baseline, an ensemble of ENSEMBLE bagged models with different
  seeds; their spread is the uncertainty (`log_speedup_std`) the `model` strategy trades off;
- pass: the probability that the recipe's outputs pass verification (a classifier);
- memory: the log of the model's own memory against the baseline's;
- quality: the log10 of the quality error (`results.quality_error`);
- setup: the log of the seconds a recipe takes to set up (its compile, export, calibration); a
  recipe stopped at its time limit counts as taking TIMEOUT_SETUP_FACTOR times that limit.

A target with too few rows (or one class only) has no model: its prediction is the prior
(speedup 1 with a wide spread, pass 0.5) and `notes` says so. Saved as JSON with LightGBM's own
text format for the trees: loading a model runs no code from the file.
"""

from __future__ import annotations

import json
import math
import os
import re
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from agnitra.errors import UserError
from agnitra.search.costmodel.features import Featurizer

SCHEMA = "agnitra.costmodel/1"
ENSEMBLE = 5
MIN_ROWS = 8
PRIOR_STD = 0.7  # log-speedup spread where nothing is known (about 2x either way)
QUALITY_FLOOR = 1e-7
# small trees: larger ones fit the datasets better but order a search's measurements worse
# (the settings tried: docs/search.md)
PARAMS = {
    "learning_rate": 0.05, "num_leaves": 15, "min_data_in_leaf": 3, "min_data_in_bin": 1, "feature_fraction": 0.9,
    "bagging_fraction": 0.8, "bagging_freq": 1, "lambda_l2": 1.0, "verbose": -1, "num_threads": 1, "deterministic": True, "force_row_wise": True,
}
ROUNDS = 150
# boosters trained at once (each on one thread): a search retrains after every candidate while its
# worker process waits, so the fit uses the cores the worker leaves idle
FIT_THREADS = max(1, min(4, os.cpu_count() or 1))
# trees added to a base model's (`CostModel.fit(base=)`): a search's retrain after each candidate
# continues the model trained on the store instead of training ROUNDS trees anew (quicker, and it
# searched no worse: docs/search.md)
WARM_ROUNDS = 20
WARM_LEARNING_RATE = 0.2  # the continued trees' step: large enough that they learn a new measurement about as a fresh fit would
# a recipe stopped at its time limit would have taken longer: its setup counts as this many times the
# limit (the limit itself, a lower bound, made the model predict far too short setups: docs/search.md)
TIMEOUT_SETUP_FACTOR = 2.0


@dataclass
class Prediction:
    log_speedup: float
    log_speedup_std: float
    p_pass: float
    memory_ratio: float | None = None
    quality_error: float | None = None
    setup_s: float | None = None

    @property
    def speedup(self) -> float:
        return math.exp(self.log_speedup)

    def to_dict(self) -> dict:
        doc = asdict(self)
        doc["speedup"] = round(self.speedup, 4)
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in doc.items()}


@dataclass
class CostModel:
    featurizer: Featurizer
    speed: list = field(default_factory=list)  # lightgbm Boosters
    passing: object | None = None
    pass_constant: float | None = None  # where one class only was seen
    memory: object | None = None
    quality: object | None = None
    setup: object | None = None
    info: dict = field(default_factory=dict)  # rows per target, device kinds, the training groups
    notes: list[str] = field(default_factory=list)

    @classmethod
    def fit(cls, rows: list[dict], weights: list[float] | None = None, seed: int = 0, base: "CostModel | None" = None,
            recipes: list[list[dict]] | None = None) -> "CostModel":
        """Train on dataset rows (`costmodel.dataset`); `weights` count some rows more (the
        workload being searched, as its measurements arrive). With `base`, each of its boosters is
        continued by WARM_ROUNDS trees on these rows (its vocabulary kept) instead of ROUNDS trees
        trained anew: a search's retrain after each candidate. `recipes`: steps whose vocabulary
        the model gets besides the rows' (the candidates a search may continue it on)."""
        lgb = lightgbm()
        featurizer = base.featurizer if base is not None else Featurizer.fit(rows, recipes)
        x = featurizer.transform(rows)
        w = np.asarray(weights if weights is not None else [1.0] * len(rows), dtype=np.float64)
        model = cls(featurizer, info={"rows": len(rows), "device_kinds": sorted({r.get("device_kind") or "" for r in rows}),
                                      "groups": len({r.get("group") for r in rows})})

        unchecked = featurizer.without_checks(x)
        with ThreadPoolExecutor(max_workers=FIT_THREADS) as pool:  # the boosters train side by side (LightGBM releases the GIL)

            def train(mask, y, objective: str, seed_offset: int = 0, bagging: bool = True, checks: bool = False, start=None) -> Future:
                params = dict(PARAMS, objective=objective, seed=seed + seed_offset, bagging_seed=seed + seed_offset, feature_fraction_seed=seed + seed_offset)
                if not bagging:
                    params.update(bagging_fraction=1.0, bagging_freq=0)
                data = lgb.Dataset((x if checks else unchecked)[mask], label=y, weight=w[mask], free_raw_data=True, params={"verbose": -1, "min_data_in_bin": 1})
                if start is not None:  # the base's booster, continued
                    return pool.submit(lgb.train, dict(params, learning_rate=WARM_LEARNING_RATE), data, num_boost_round=WARM_ROUNDS, init_model=start, keep_training_booster=False)
                return pool.submit(lgb.train, params, data, num_boost_round=ROUNDS)

            def base_of(name: str, index: int | None = None):
                booster = getattr(base, name, None) if base is not None else None
                if isinstance(booster, list):
                    return booster[index] if index is not None and index < len(booster) else None
                return booster

            speed_mask = np.array([timed(r) for r in rows], dtype=bool)
            model.info["speed_rows"] = int(speed_mask.sum())
            speed: list[Future] = []
            if speed_mask.sum() >= MIN_ROWS:
                y = np.log([r["speedup"] for r, m in zip(rows, speed_mask) if m])
                speed = [train(speed_mask, y, "regression", i, start=base_of("speed", i)) for i in range(ENSEMBLE)]
            else:
                model.notes.append(f"speed: {int(speed_mask.sum())} measured rows (fewer than {MIN_ROWS}): the prior is predicted")
            others: dict[str, Future] = {}
            pass_mask = np.array([r.get("passed") is not None or r.get("status") == "failed" for r in rows], dtype=bool)
            labels = np.array([1.0 if r.get("passed") else 0.0 for r, m in zip(rows, pass_mask) if m])
            model.info["pass_rows"] = int(pass_mask.sum())
            if pass_mask.sum() >= MIN_ROWS and 0 < labels.sum() < len(labels):
                others["passing"] = train(pass_mask, labels, "binary", bagging=False, checks=True, start=base_of("passing"))
            elif len(labels):
                model.pass_constant = float(labels.mean())
                model.notes.append(f"pass: {len(labels)} rows of one class or fewer than {MIN_ROWS}: P(pass) = {model.pass_constant:.2f} everywhere")
            memory_mask = np.array([bool(r.get("model_bytes") and r.get("baseline_model_bytes")) for r in rows], dtype=bool)
            if memory_mask.sum() >= MIN_ROWS:
                y = np.log([r["model_bytes"] / r["baseline_model_bytes"] for r, m in zip(rows, memory_mask) if m])
                others["memory"] = train(memory_mask, y, "regression", bagging=False, start=base_of("memory"))
            quality_mask = np.array([r.get("quality_error") is not None and r.get("status") == "ok" for r in rows], dtype=bool)
            if quality_mask.sum() >= MIN_ROWS:
                y = np.log10([r["quality_error"] + QUALITY_FLOOR for r, m in zip(rows, quality_mask) if m])
                others["quality"] = train(quality_mask, y, "regression", bagging=False, checks=True, start=base_of("quality"))
            setup = [_setup_s(r) for r in rows]
            setup_mask = np.array([v is not None for v in setup], dtype=bool)
            if setup_mask.sum() >= MIN_ROWS:
                others["setup"] = train(setup_mask, np.log1p([v for v in setup if v is not None]), "regression", bagging=False, start=base_of("setup"))
            model.speed = [future.result() for future in speed]
            for name, future in others.items():
                setattr(model, name, future.result())
        return model

    def predict(self, rows: list[dict]) -> list[Prediction]:
        return self.predict_features(self.featurizer.transform(rows)) if rows else []

    def predict_recipes(self, base: dict, recipes: list[list[dict]]) -> list[Prediction]:
        """One workload under many recipes (`Featurizer.transform_recipes`)."""
        return self.predict_features(self.featurizer.transform_recipes(base, recipes)) if recipes else []

    def predict_features(self, x: np.ndarray) -> list[Prediction]:
        """Speed, memory and setup from every feature but the checks; P(pass) and the quality
        change with them (`Featurizer.comparisons`)."""
        n, unchecked = len(x), self.featurizer.without_checks(x)
        if self.speed:
            runs = np.stack([b.predict(unchecked) for b in self.speed])
            mean, std = runs.mean(0), runs.std(0)
        else:
            mean, std = np.zeros(n), np.full(n, PRIOR_STD)
        if self.passing is not None:
            p = self.passing.predict(x)
        else:
            p = np.full(n, 0.5 if self.pass_constant is None else self.pass_constant)
        memory = np.exp(self.memory.predict(unchecked)) if self.memory is not None else [None] * n
        quality = np.power(10.0, self.quality.predict(x)) if self.quality is not None else [None] * n
        setup = np.expm1(self.setup.predict(unchecked)) if self.setup is not None else [None] * n
        return [Prediction(float(m), float(s), float(pp), None if mem is None else float(mem), None if q is None else float(q), None if t is None else max(0.0, float(t)))
                for m, s, pp, mem, q, t in zip(mean, std, p, memory, quality, setup)]

    # ---- files --------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "schema": SCHEMA, "featurizer": self.featurizer.to_dict(), "info": self.info, "notes": self.notes, "pass_constant": self.pass_constant,
            "speed": [b.model_to_string() for b in self.speed],
            "passing": self.passing.model_to_string() if self.passing is not None else None,
            "memory": self.memory.model_to_string() if self.memory is not None else None,
            "quality": self.quality.model_to_string() if self.quality is not None else None,
            "setup": self.setup.model_to_string() if self.setup is not None else None,
        }
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "CostModel":
        lgb = lightgbm()
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise UserError(f"no cost model at {path}; train one with `agnitra costmodel train`") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(f"{path} is not a readable cost model ({type(exc).__name__}); train it again with `agnitra costmodel train`") from None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise UserError(f"{path} is not an {SCHEMA} cost model; train it again with `agnitra costmodel train`")
        try:
            booster = lambda text: lgb.Booster(model_str=text) if text else None  # noqa: E731
            return cls(Featurizer.from_dict(doc["featurizer"]), [booster(t) for t in doc["speed"]], booster(doc["passing"]), doc.get("pass_constant"),
                       booster(doc["memory"]), booster(doc["quality"]), booster(doc.get("setup")), doc.get("info", {}), doc.get("notes", []))
        except (KeyError, TypeError, lgb.basic.LightGBMError) as exc:
            raise UserError(f"{path} is a damaged cost model ({type(exc).__name__}: {exc}); train it again with `agnitra costmodel train`") from None


def lightgbm():
    """LightGBM, or a one-line error naming what is missing (its wheel, or the OpenMP runtime)."""
    try:
        import lightgbm as lgb
    except (ImportError, OSError) as exc:
        raise UserError(f"the cost model needs LightGBM, which did not load ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                        "pip install lightgbm (on Debian also: apt-get install libgomp1)") from None
    return lgb


def _setup_s(row: dict) -> float | None:
    """Seconds to set the recipe up: measured, or for a recipe stopped at its time limit,
    TIMEOUT_SETUP_FACTOR times that limit (it would have taken longer, by how much is not known)."""
    if row.get("status") == "ok" and row.get("setup_s") is not None:
        return float(row["setup_s"])
    if row.get("status") == "timeout":
        limit = timeout_limit(row.get("reason") or "")
        return None if limit is None else TIMEOUT_SETUP_FACTOR * limit
    return None


def timeout_limit(reason: str) -> float | None:
    """The time limit a stopped recipe ran past, read from its reason."""
    match = re.search(r"time limit of (\d+(?:\.\d+)?) s", reason)
    return float(match.group(1)) if match else None


def timed(row: dict) -> bool:
    """A row whose recipe was timed against its baseline (a speedup to learn from)."""
    return row.get("status") == "ok" and bool(row.get("speedup")) and row["speedup"] > 0
