"""The peers as candidates of the search: each with its expected seconds, measured in the same
queue as the recipes the strategy proposes, so that no phase of their own eats the budget.

A peer that is a recipe (the `torch.compile` modes) is measured exactly as a candidate and can be
the answer; one that is not (ONNX Runtime) runs beside the baseline in its own short run and is
only compared. The opener, the one compile that usually wins on a GPU (`compile`, the default
mode), goes first, so any budget that fits one compile answers at least that. The others take
their turn while the seconds spent on peers stay under PEER_SHARE of the search's, cheapest first;
one expected to take longer than the time left is named with its expected seconds and not started.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agnitra.search.space import Candidate

PEER_SHARE = 0.5  # of the search's seconds so far, at most, on peers before a recipe's turn again
# expected seconds of a peer's run on a fresh machine (its compile or export, the timed rounds, the
# checks), before one is measured; a measured peer moves the others by its own miss (`calibrate`)
EXPECTED_S = {
    "cuda": {"compile": 30.0, "compile-reduce-overhead": 40.0, "compile-max-autotune": 120.0, "onnxruntime": 25.0, "onnxruntime-int8": 25.0},
    "cpu": {"compile": 20.0, "compile-reduce-overhead": 25.0, "compile-max-autotune": 60.0, "onnxruntime": 15.0, "onnxruntime-int8": 20.0},
}
OPENER = {"cuda": "compile"}  # the CPU's first candidate is what the store recommends (`warm_start`)
COMPILE_PEERS = ("compile", "compile-reduce-overhead", "compile-max-autotune")


@dataclass
class Peer:
    name: str
    expected_s: float
    candidate: Candidate | None = None  # a recipe peer's candidate; None: a variant that only compares
    space_candidate: Candidate | None = None  # the same recipe in the searched space, told to the strategy


@dataclass
class PeerQueue:
    pending: list[Peer]
    opener: str | None = None
    spent_s: float = 0.0  # seconds the peers' runs took so far
    left_out: list[str] = field(default_factory=list)  # peers not measured, each with why
    _misses: dict[bool, list[float]] = field(default_factory=dict)  # measured / expected seconds, compile peers apart from the others

    @classmethod
    def of(cls, names: list[str], space: list[Candidate], device_type: str) -> "PeerQueue":
        from agnitra.bench.variants import get_variant
        from agnitra.bench.variants.recipe import RecipeVariant

        expected = EXPECTED_S.get(device_type, EXPECTED_S["cpu"])
        by_key = {c.recipe.key(): c for c in space}
        peers = []
        for name in dict.fromkeys(names):
            variant = get_variant(name)
            candidate = Candidate(variant.recipe, 1.0) if isinstance(variant, RecipeVariant) else None
            in_space = by_key.get(candidate.recipe.key()) if candidate is not None else None
            peers.append(Peer(name, expected.get(name, 30.0), candidate, in_space))
        opener = OPENER.get(device_type)
        peers.sort(key=lambda p: (p.name != opener, p.expected_s))
        return cls(peers, opener if any(p.name == opener for p in peers) else None)

    def due(self, search_s: float, strategy_done: bool) -> Peer | None:
        """The peer whose turn it is now (the opener at once; the others while their share of the
        search's seconds allows, or once the strategy has nothing left), else None."""
        if not self.pending:
            return None
        if self.pending[0].name == self.opener or strategy_done or self.spent_s < PEER_SHARE * search_s:
            return self.pending[0]
        return None

    def expected(self, peer: Peer) -> float:
        """Its prior seconds, moved by the mean miss of the measured peers of its kind (a compile
        mode by the compiles', ONNX Runtime by its own)."""
        misses = self._misses.get(peer.name in COMPILE_PEERS, [])
        return peer.expected_s * (sum(misses) / len(misses) if misses else 1.0)

    def take(self, peer: Peer) -> None:
        """`peer` is being measured (one of several at once): no longer due; `measured` follows."""
        self.pending.remove(peer)

    def measured(self, peer: Peer, seconds: float) -> None:
        if peer in self.pending:  # not taken before: measured at its turn
            self.pending.remove(peer)
        self.spent_s += seconds
        if seconds > 0:  # 0: the strategy had measured its recipe already
            self._misses.setdefault(peer.name in COMPILE_PEERS, []).append(max(0.2, min(5.0, seconds / peer.expected_s)))

    def leave_out(self, peer: Peer, why: str) -> None:
        self.pending.remove(peer)
        self.left_out.append(f"{peer.name} ({why})")

    def note(self) -> str:
        return f"peers not measured: {'; '.join(self.left_out)}" if self.left_out else ""
