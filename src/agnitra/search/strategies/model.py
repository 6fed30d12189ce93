"""`model`: the cost model picks what to measure next, and learns from each measurement.

Before the first ask, a cost model (`search.costmodel`) is trained on the store's measurements
on this kind of device; it predicts every candidate's speedup with its uncertainty and the
probability that it passes verification. Each ask takes the candidate with the largest expected
improvement in log speedup over the best correct one measured so far (the baseline at first),
times its probability of passing, per second it is expected to take (its predicted setup, a
compile or an export, plus MEASURE_S): a likely failure is measured late (below MIN_P_PASS, only
once no likelier candidate is left), an uncertain candidate
with a chance of a large win early, a long compile only when it promises more, and one unlikely
to finish in the time the budget leaves it (`time_left`; at most as likely as its class's stored
setups and timeouts say, `FinishTimes`) only when it promises that much more.
The search stops once no open candidate is expected to gain STOP_GAIN (`stop_note` says so). Each tell adds the measurement to the training rows, counted
OWN_WEIGHT times (it is the very workload being searched), and retrains (active learning): the
store's model, trained once more at the first tell with every candidate's vocabulary, continued by
a few trees on all the rows (`CostModel.fit(base=)`), not trained anew after each candidate. With
too few stored measurements it orders by the transforms' priors, and says so.

The uncertainty is the ensemble's spread, which shrinks as recipes of the same transforms are
measured, plus NOVEL_STD for each transform not yet measured on this workload: the trees agree
closely even where they are wrong (a llama-1b decode step, unlike the small decoders they saw),
so a recipe that brings a new transform keeps a chance over parameter variants of one measured.

One measurement moves the trees little (a leaf needs several rows), so what this run's failures
say is also applied directly (`RunEvidence`): a lossy step (`Transform.lossy`) of a recipe that
failed verification, or the step a failed setup names, makes every recipe with that step less
likely to pass, and its other settings somewhat less; a timeout sets the seconds expected of
recipes with its steps to at least the limit it ran past. A recipe with the step that passes
clears the suspicion.

What a measurement says of the workload itself also reaches recipes unlike it (`WorkloadOffsets`):
the first measurement of each group (a CUDA-graph replay or a Python launch, and its set of
transforms) moves the predicted speed of the groups of its kind not yet measured here by what it
missed, shrunk by half; the retrained trees move only the measured recipes' leaves, so a miss on
one graph replay would otherwise leave the other graph replays where they were.

The setup model is calibrated on this workload too: what each built recipe with a compiler or
runtime step (the peers' compiles first) took to set up, against what the model predicted, moves
the prediction of every other such recipe by the mean of those misses (in log1p seconds, the setup
model's own scale). The store's compiles ran on other, smaller models and often warm caches, so
on a new model with cold caches they take several times the predicted (docs/search.md).
"""

from __future__ import annotations

import math
from collections import Counter
from statistics import NormalDist
from typing import Any

from agnitra.errors import UserError
from agnitra.search.space import Candidate
from agnitra.search.strategies.base import SearchContext, Strategy, register_strategy
from agnitra.search.strategies.blocking import FailedSteps
from agnitra.search.strategies.evidence import RunEvidence, has_runtime_step
from agnitra.search.strategies.finish import FinishTimes, setup_class
from agnitra.search.strategies.offsets import Group, WorkloadOffsets, group_of
from agnitra.search.strategies.sensitivity import Sensitivity

OWN_WEIGHT = 5.0
EPSILON = 1e-9
MEASURE_S = 5.0  # a candidate's run besides its setup: worker call, timed rounds, checks
NOVEL_STD = 0.15  # log-speedup spread a transform not yet measured on this workload adds (so a new transform gets a chance)
# below this P(pass), a candidate waits until every likelier one is measured: a candidate more
# likely to fail verification than to pass it is measured only once nothing likelier is left, so
# less of the search's time goes to failed verification (docs/search.md)
MIN_P_PASS = 0.5
# the search stops once no open candidate is expected to gain this much log speedup over the best
# correct one so far (expected improvement times P(pass)), with the spread widened to what its predictions
# missed by on this workload: small enough that it seldom stops short of the best (docs/search.md)
STOP_GAIN = 0.002
STANDARD_NORMAL = NormalDist()
SETUP_LOG_STD = 0.5  # how far a predicted setup time is off, in log seconds (a factor of about 1.6)
FINISH_NOTE_S = 60.0  # the report says which setup classes are unlikely to finish within this


@register_strategy
class ModelGuided(Strategy):
    name = "model"

    def __init__(self, space: list[Candidate], model=None, rows: list[dict] | None = None, workload_row: dict | None = None, stop_gain: float = STOP_GAIN) -> None:
        super().__init__(space)
        self.stop_gain = stop_gain  # 0: measure on until the space or the budget is spent
        self.stopped = ""  # why the search stopped before its space was spent
        self.measured_mine = 0  # candidates this strategy asked for and was told of (the peers' runs are told, not asked)
        self.misses: list[float] = []  # measured minus predicted log speedup, on this workload, before each was learned
        self.setup_misses: list[float] = []  # measured minus predicted log1p setup seconds of recipes with a runtime step, here
        self.model = model
        self.base = None  # the store's rows' model that each retrain continues (`_retrain`)
        self.rows = list(rows or [])  # the training rows the model came from
        self.finish_times = FinishTimes(self.rows)  # per setup class, the chance a setup finishes in t s
        self.own: list[dict] = []  # this workload's measurements, as rows
        self.workload_row = dict(workload_row or {})
        self.asked: set[str] = set()
        self.failed = FailedSteps()
        self.predictions: dict[str, Any] = {}
        self.offsets = WorkloadOffsets()
        self.groups: dict[str, Group] = {}  # each candidate's `group_of`, computed once
        self.setup_classes: dict[str, str | None] = {}  # each candidate's `setup_class`, computed once
        self.raw_log_speedup: dict[str, float] = {}  # the model's own prediction, before the offset
        self.best_log_speedup = 0.0  # the baseline
        self.measured_sets: Counter[frozenset[str]] = Counter()  # measured recipes per set of transforms
        self.evidence = RunEvidence()
        self.sensitivity = Sensitivity()
        if self.model is not None:
            self._predict_all()

    def attach(self, context: SearchContext) -> list[str]:
        from agnitra.search.costmodel.from_store import train_from_store
        from agnitra.store import open_store

        self.workload_row = dict(context.workload_row)
        kind = self.workload_row.get("device_kind")
        priors = "candidates in the order of the transforms' priors"
        try:
            store = open_store(context.store_url) if context.store_url else open_store()
            try:
                model, rows, why_not = train_from_store(store, kind)
            finally:
                store.close()
        except Exception as exc:  # noqa: BLE001 - no store: the priors order, said
            return [f"model: the store was not read ({type(exc).__name__}: {exc}); {priors}"]
        if model is None:
            return [f"model: {why_not}; {priors} until this run's own measurements train it"]
        self.rows, self.model = rows, model
        self.finish_times = FinishTimes(rows)
        self._predict_all()
        measured, groups = sum(1 for r in rows if r.get("status") == "ok" and r.get("speedup")), len({r.get("group") for r in rows})
        return [f"model: cost model trained on {measured} measurements of {groups} stored run(s) on {kind}; retrained after each candidate"] + [f"model: {n}" for n in self.model.notes]

    def ask(self) -> Candidate | None:
        open_candidates = [c for c in self.space if c.recipe.key() not in self.asked and self.failed.allows(c)]
        if not open_candidates or self.stopped:
            return None
        if self.predictions:
            p_pass = {c.recipe.key(): self._p_pass(c) for c in open_candidates}
            if self._settled(open_candidates, p_pass):
                return None
            likely = [c for c in open_candidates if p_pass[c.recipe.key()] >= MIN_P_PASS]
            candidate = max(likely or open_candidates, key=lambda c: self._acquisition(c, p_pass[c.recipe.key()]))  # the first of equals: the best prior
        else:
            candidate = open_candidates[0]  # no model yet: the transforms' priors
        self.asked.add(candidate.recipe.key())
        return candidate

    def tell(self, candidate: Candidate, result: Any) -> None:
        self.failed.learn(candidate, result)
        self.evidence.learn(candidate, result)
        self.sensitivity.learn(candidate, result, self.predictions.get(candidate.recipe.key()))
        self.measured_mine += candidate.recipe.key() in self.asked
        self._learn_miss(candidate, result)
        self._learn_setup_miss(candidate, result)
        self._learn_offset(candidate, result)
        self.measured_sets[_transforms_of(candidate)] += 1
        speedup = getattr(result, "speedup", None)
        passed = bool(getattr(result, "passed", False))
        if passed and speedup:
            self.best_log_speedup = max(self.best_log_speedup, math.log(speedup))
        row = dict(self.workload_row, recipe=None, steps=candidate.recipe.to_dict()["steps"],
                   status=getattr(result, "status", "failed"), speedup=speedup, passed=passed if getattr(result, "status", "") == "ok" else False, group="this run",
                   setup_s=getattr(result, "setup_s", None), reason=getattr(result, "reason", "") or "")
        correctness = getattr(result, "correctness", None)
        if correctness is not None and correctness.value is not None:
            from agnitra.results import quality_error

            row["quality_error"] = quality_error(correctness.metric, correctness.value)
        self.own.append(row)
        self.finish_times.learn(row)  # this workload's own setups and timeouts too
        self._retrain()

    def learned_notes(self) -> list[str]:
        said = self.sensitivity.describe()
        notes = [f"model: {said}; the other lossy recipes' P(pass) was shifted by it"] if said else []
        unlikely = {cls: p for cls, p in self.finish_times.describe(FINISH_NOTE_S).items() if p < 0.5}
        if unlikely:
            notes.append(f"model: the stored setups and timeouts give {', '.join(f'{cls} {p:.2f}' for cls, p in unlikely.items())} as the chance to set up "
                         f"within {FINISH_NOTE_S:.0f} s: such recipes were asked for only where they promised that much more")
        return notes

    def learned_from_store(self) -> bool:
        return bool(self.rows) and self.model is not None and bool(self.model.speed)

    def stop_note(self) -> str:
        return self.stopped

    def _settled(self, open_candidates: list[Candidate], p_pass: dict[str, float]) -> bool:
        """Whether to stop: the model learned from the store, it measured at least one candidate of
        its own choosing, and no open candidate's expected gain (expected improvement of the log
        speedup over the best so far, times P(pass)) reaches `stop_gain`. Says why in `stopped`."""
        if not self.stop_gain or not self.learned_from_store() or not self.measured_mine:
            return False
        gains = {c.recipe.key(): p_pass[c.recipe.key()] * self._improvement(c, stopping=True) for c in open_candidates}
        best = max(open_candidates, key=lambda c: gains[c.recipe.key()])
        gain = gains[best.recipe.key()]
        if gain >= self.stop_gain:
            return False
        self.stopped = (f"model: stopped after {self.measured_mine} candidate(s) of its own, {len(open_candidates)} left: none is expected to gain {self.stop_gain:.1%} "
                        f"over the best so far (the most, {math.expm1(gain):.2%}: {best.recipe.name}); the other strategies spend the whole budget")
        return True

    def predicted(self, candidate: Candidate) -> dict | None:
        if self.model is None or not self.model.speed:
            return None  # the prior, not a prediction
        prediction = self.predictions.get(candidate.recipe.key())
        if prediction is None:
            return None
        said = prediction.to_dict()
        if self.seconds_left:  # the chance it finishes in the time it was given, which weighed its turn
            said["p_finish"] = round(self._p_finish(candidate, self._seconds(candidate, prediction)), 4)
        return said

    # ---- the model ------------------------------------------------------------------------------

    def _retrain(self) -> None:
        """The model again with this workload's measurements: the store's model (with every
        candidate's vocabulary, trained once at the first retrain) continued by a few trees on
        the store's rows and this run's (`CostModel.fit(base=)`), not trained anew each time."""
        from agnitra.search.costmodel import CostModel

        if not self.rows and len(self.own) < 2:
            return
        rows = self.rows + self.own
        weights = [1.0] * len(self.rows) + [OWN_WEIGHT] * len(self.own)
        try:
            if self.rows and self.base is None:
                self.base = CostModel.fit(self.rows, recipes=[c.recipe.to_dict()["steps"] for c in self.space])
            self.model = CostModel.fit(rows, weights=weights, base=self.base)
        except UserError:
            return  # attach said there is no cost model
        self._predict_all(keep_asked=True)

    def _predict_all(self, keep_asked: bool = False) -> None:
        """Every pending candidate's prediction, its speed moved by this workload's offset for its
        group where its group is not measured here yet (`WorkloadOffsets`)."""
        pending = [c for c in self.space if not (keep_asked and c.recipe.key() in self.asked)]
        recipes = [c.recipe.to_dict()["steps"] for c in pending]
        for candidate, steps, prediction in zip(pending, recipes, self.model.predict_recipes(self.workload_row, recipes)):
            key = candidate.recipe.key()
            if key not in self.groups:  # once per candidate, not at every retrain
                self.groups[key], self.setup_classes[key] = group_of(steps), setup_class(steps)
            group = self.groups[key]
            self.raw_log_speedup[key] = prediction.log_speedup
            prediction.log_speedup += self.offsets.offset(group)
            self.predictions[key] = prediction

    def _learn_miss(self, candidate: Candidate, result: Any) -> None:
        p, speedup = self.predictions.get(candidate.recipe.key()), getattr(result, "speedup", None)
        if p is not None and speedup and getattr(result, "status", "") == "ok" and self.model is not None and self.model.speed:
            self.misses.append(math.log(speedup) - p.log_speedup)

    def _learn_offset(self, candidate: Candidate, result: Any) -> None:
        """A measured recipe's group, with its miss against the model's own prediction where it
        was timed and the model learned from the store (`WorkloadOffsets`)."""
        key, speedup = candidate.recipe.key(), getattr(result, "speedup", None)
        raw = self.raw_log_speedup.get(key)
        if raw is not None and speedup and speedup > 0 and getattr(result, "status", "") == "ok" and self.learned_from_store():
            self.offsets.learn(self.groups[key], math.log(speedup) - raw)  # predicted, so grouped (`_predict_all`)

    def _learn_setup_miss(self, candidate: Candidate, result: Any) -> None:
        """A built recipe with a compiler or runtime step: how far its setup was from the prediction."""
        p, setup_s = self.predictions.get(candidate.recipe.key()), getattr(result, "setup_s", None)
        if (p is None or p.setup_s is None or not setup_s or getattr(result, "status", "") != "ok" or getattr(result, "speedup", None) is None
                or not has_runtime_step(candidate)):
            return
        self.setup_misses.append(math.log1p(setup_s) - math.log1p(max(p.setup_s, 0.0)))

    def _setup_s(self, candidate: Candidate, p) -> float:
        """The predicted setup seconds, moved by this workload's setup misses where the recipe has
        a compiler or runtime step."""
        predicted = max(p.setup_s or 0.0, 0.0)
        if not self.setup_misses or not has_runtime_step(candidate):
            return predicted
        return math.expm1(math.log1p(predicted) + sum(self.setup_misses) / len(self.setup_misses))

    def _miss_std(self) -> float:
        """How far the model's predictions missed on this workload so far (root mean square): its
        uncertainty here is at least that, however closely its trees agree."""
        return math.sqrt(sum(m * m for m in self.misses) / len(self.misses)) if self.misses else 0.0

    def _spread(self, candidate: Candidate, p, stopping: bool = False) -> float:
        """The uncertainty of a candidate's log speedup: the ensemble's spread, shrinking with each
        measured recipe of the same transforms, and NOVEL_STD more for each of its transforms not
        yet measured on this workload in any recipe (the trees' spread says how much they agree,
        not how wrong they are on a model unlike their data)."""
        transforms = _transforms_of(candidate)
        siblings = self.measured_sets[transforms]
        novel = sum(1 for t in transforms if not any(t in measured for measured in self.measured_sets))
        return math.hypot(max(p.log_speedup_std, 0.02) / math.sqrt(1 + siblings), NOVEL_STD * math.sqrt(novel), self._miss_std() if stopping else 0.0)

    def _p_pass(self, candidate: Candidate) -> float:
        """The cost model's probability that the candidate passes verification, with what this
        run's failures say (`RunEvidence`), and at most what this workload's sensitivity to lossy
        steps, measured here, leaves a lossy candidate (`Sensitivity`)."""
        p = self.predictions.get(candidate.recipe.key())
        if p is None:
            return 0.0
        classifier = p.p_pass * self.evidence.pass_factor(candidate)
        shifted = self.sensitivity.pass_probability(candidate, p)
        return classifier if shifted is None else min(classifier, shifted)

    def _acquisition(self, candidate: Candidate, p_pass: float | None = None) -> float:
        """Expected improvement of the log speedup over the best correct one so far, times the
        probability of passing verification. The spread shrinks with each measured recipe of the
        same transforms (their parameters aside): the tenth setting of a policy the model has not
        learned apart is not as uncertain as the first of a transform never measured."""
        p = self.predictions.get(candidate.recipe.key())
        if p is None:
            return -math.inf
        improvement = self._improvement(candidate)
        p_pass = self._p_pass(candidate) if p_pass is None else p_pass
        seconds = self._seconds(candidate, p)  # per second of the budget: a long compile must promise more
        return self._p_finish(candidate, seconds) * (p_pass * improvement + EPSILON * p_pass * p.log_speedup) / seconds

    def _seconds(self, candidate: Candidate, p) -> float:
        """The seconds the candidate is expected to take: its setup (at least what this run's
        evidence says) and its run."""
        return MEASURE_S + max(self._setup_s(candidate, p), self.evidence.least_seconds(candidate))

    def _p_finish(self, candidate: Candidate, seconds: float) -> float:
        """The chance the candidate finishes in the time it may take: from its predicted seconds
        (`p_finish_from_seconds`), and at most what the stored setups and timeouts of its class say
        (`FinishTimes`: the compiles that tune their kernels mostly ran past their limits on a GPU)."""
        p = p_finish_from_seconds(seconds, self.seconds_left)
        if not self.seconds_left:
            return p
        key = candidate.recipe.key()
        if key not in self.setup_classes:
            self.setup_classes[key] = setup_class(candidate.recipe.to_dict()["steps"])
        by_class = self.finish_times.p_finish(self.setup_classes[key], self.seconds_left - MEASURE_S)
        return p if by_class is None else min(p, by_class)

    def _improvement(self, candidate: Candidate, stopping: bool = False) -> float:
        """Expected improvement of the candidate's log speedup over the best correct one so far."""
        p = self.predictions.get(candidate.recipe.key())
        if p is None:
            return 0.0
        sigma = self._spread(candidate, p, stopping)
        z = (p.log_speedup - self.best_log_speedup) / sigma
        return sigma * (z * STANDARD_NORMAL.cdf(z) + STANDARD_NORMAL.pdf(z))


def p_finish_from_seconds(seconds: float, left: float | None) -> float:
    """The chance a candidate expected to take `seconds` finishes in the `left` it may take
    (its predicted setup is off by SETUP_LOG_STD in log seconds); 1 where nothing is known: a
    candidate predicted to outlast what is left is asked for only when it promises that much more."""
    if not left:
        return 1.0
    return STANDARD_NORMAL.cdf(math.log(left / seconds) / SETUP_LOG_STD)


def _transforms_of(candidate: Candidate) -> frozenset[str]:
    return frozenset(step.transform for step in candidate.recipe.steps)
