"""The search on K evaluation slots of a Ray cluster at once (`--executor ray`, `bench.ray_slots`):
`tuner.search` runs this loop when its runner is a `SlotPool`.

The same loop as for one worker (the same budget, reserve, caps, peers, journal and anytime best),
but it asks the strategy for a candidate whenever a slot is free, so up to K are measured at once,
and tells each result as it returns (`ray.wait`). The strategies keep what they asked for apart
from what they were told, so several asks before a tell are theirs to handle.

Candidates measured on different nodes are not compared by their raw times: each one's run holds
its own baseline on the same slot, and its speedup is the ratio within that run. On a GPU the
reference that graph-replaying recipes are rescaled against (`search.reference`) is kept per
device, never mixed across them. The final run, on one device, re-measures the finalists as for
a local search. Each result says where it was measured (`measured_on`: slot, node, host, pid, GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from agnitra.bench.ray_slots import Done, SlotPool
from agnitra.results import CandidateResult
from agnitra.search.peers import Peer
from agnitra.search.reference import ReferenceBaseline
from agnitra.search.space import Candidate
from agnitra.search.tuner import MIN_CANDIDATE_S, _candidate_limit, _Loop, failed_candidate, measure_candidate, peer_variant_result, screening_variants

WAIT_S = 1.0  # the loop wakes at least this often (a slot that loaded, the budget's edge)


@dataclass
class _Flight:
    """A measurement sent to a slot: what to record and tell when it returns."""

    key: str
    candidate: Candidate | None  # None: a peer that is not a recipe
    prediction: dict | None
    tell: Callable[[Candidate, Any], None]
    peer: Peer | None = None  # the peer whose turn this is
    peer_name: str | None = None  # the peer the result is credited to
    started_s: float = 0.0


class SpreadLoop(_Loop):
    """`tuner._Loop` over a `SlotPool`: a candidate for every idle slot, each result taken as it returns."""

    def __init__(self, strategy, pool: SlotPool, device_report, config, budget, reserve, folder, done, progress, reference, peers) -> None:
        super().__init__(strategy, pool, device_report, config, budget, reserve, folder, done, progress, reference, peers)
        self.pool = pool
        self.flights: dict[str, _Flight] = {}  # by recipe key, in flight on a slot
        self.waiting: dict[str, list[Candidate]] = {}  # asked again while in flight: told its result when it returns
        self.references: dict[str, ReferenceBaseline] = {}  # on a GPU: one per device
        self.stopped = False  # nothing more is sent: the budget's edge, or no slot left
        self.exhausted = False  # the strategy and the peers have nothing left

    def run(self) -> None:
        while True:
            self._fill()
            if not self.pool.in_flight:
                if self.stopped or self.exhausted:
                    return
                if not self.pool.alive:
                    self._stop(f"no evaluation slot could run them ({'; '.join(self.pool.not_started) or 'every slot was lost'})")
                    return
                if self._left() < MIN_CANDIDATE_S:  # slots still loading at the budget's edge
                    self._stop(f"the rest of the {self.budget.total_s:.0f} s budget was kept for the final run; raise --budget to measure them")
                    return
            for ended in self.pool.wait(WAIT_S):
                self._returned(ended)

    def _left(self) -> float:
        return self.budget.remaining() - self.reserve(self.outcome.results)

    def _fill(self) -> None:
        """A measurement for every idle slot, while the budget and the strategy have one."""
        while not self.stopped and not self.exhausted:
            slot = self.pool.idle()
            if slot is None:
                return
            left = self._left()
            if left < MIN_CANDIDATE_S:
                self.stopped = True
                self._stop(f"the rest of the {self.budget.total_s:.0f} s budget was kept for the final run; raise --budget to measure them")
                return
            limit = _candidate_limit(self.config, left)
            if self.outcome.best is not None:
                limit = self._capped(limit)
            flight = self._next(left)
            if flight is None:
                self.exhausted = True
                return
            self._send(slot, flight, limit)

    def _next(self, left: float) -> _Flight | None:
        """The next measurement to send (a due peer, else the strategy's next candidate); what is
        measured already or in flight is told, not sent; None when nothing is left."""
        while True:
            peer = self.peers.due(self.budget.elapsed() - self.started_s, self.strategy_done) if self.peers else None
            if peer is not None:
                flight = self._peer_flight(peer, left)
                if flight is not None:
                    return flight
                continue
            if self.strategy_done:
                return None
            candidate = self._ask(left)
            if candidate is None:
                continue
            key = candidate.recipe.key()
            if key in self.flights:  # a peer's recipe in flight: told when it returns
                self.waiting.setdefault(key, []).append(candidate)
                continue
            prediction = self.strategy.predicted(candidate)
            if self._unlikely_to_finish(prediction):
                continue
            flight = _Flight(key, candidate, prediction, self.strategy.tell)
            if not self._from_journal(flight):
                return flight

    def _peer_flight(self, peer: Peer, left: float) -> _Flight | None:
        """`peer`'s measurement, or None where it needs none (its recipe measured or in flight) or
        is expected to outlast the time left."""
        if peer.candidate is not None:
            key = peer.candidate.recipe.key()
            if key in self.measured or key in self.flights:  # the strategy got there first
                self.peers.measured(peer, 0.0)
                if key in self.measured:
                    self.measured[key].peer = peer.name
                else:
                    self.flights[key].peer_name = peer.name
                return None
        expected = self.peers.expected(peer)
        if expected > left and self.outcome.results:  # the opener is tried whatever its estimate
            self.peers.leave_out(peer, f"expected to take {expected:.0f} s, {max(0.0, left):.0f} s were left; raise --budget to compare it")
            return None
        self.peers.take(peer)
        if peer.candidate is not None:
            def tell(candidate, result):
                if peer.space_candidate is not None:
                    self.strategy.tell(peer.space_candidate, result)
            flight = _Flight(peer.candidate.recipe.key(), peer.candidate, None, tell, peer, peer.name)
        else:
            flight = _Flight(f"peer:{peer.name}", None, None, lambda candidate, result: None, peer, peer.name)
        if self._from_journal(flight):
            self.peers.measured(peer, 0.0)
            return None
        return flight

    def _from_journal(self, flight: _Flight) -> bool:
        """A measurement the resumed run's journal holds: recorded and told at once."""
        result = self.done.get(flight.key)
        if result is None:
            return False
        result.peer = flight.peer_name
        self._record(flight.key, result)
        if flight.candidate is not None:
            flight.tell(flight.candidate, result)
        return True

    def _send(self, slot, flight: _Flight, limit: float) -> None:
        self.flights[flight.key] = flight
        flight.started_s = self.budget.elapsed()
        what = f"peer {flight.peer.name}" if flight.peer else f"candidate {len(self.outcome.results) + len(self.flights)}: {flight.candidate.recipe.name}"
        self.progress(f"{what} on {slot.placement.text()}{self._best_so_far()}", min(0.9, self.budget.elapsed() / self.budget.total_s))
        if flight.candidate is not None:
            self.pool.submit(slot, flight.key, measure_candidate, (flight.candidate, self.device_report, self.config), limit)
        else:
            self.pool.submit(slot, flight.key, screening_variants, (self.device_report, self.config, [flight.peer.name]), limit)

    def _returned(self, ended: Done) -> None:
        """A measurement that came back (or whose slot died or was stopped): recorded, told."""
        flight = self.flights.pop(ended.tag)
        if flight.candidate is None:
            result = peer_variant_result(flight.peer.name, ended.error or ended.value, ended.submitted)
        else:
            result = failed_candidate(flight.candidate, ended.error, ended.submitted) if ended.error is not None else ended.value
            if flight.prediction is not None:
                result.predicted = flight.prediction
        result.peer = flight.peer_name
        result.measured_on = ended.placement.to_dict() if ended.placement is not None else None
        self._record(flight.key, result)
        if flight.candidate is not None:
            flight.tell(flight.candidate, result)
        for candidate in self.waiting.pop(flight.key, []):
            self.strategy.tell(candidate, result)
        if flight.peer is not None:
            self.peers.measured(flight.peer, self.budget.elapsed() - flight.started_s)

    def _reference_of(self, result: CandidateResult) -> ReferenceBaseline | None:
        """On a GPU, the reference of the device that measured the result: baselines of two GPUs are never mixed."""
        if self.reference is None or not result.measured_on:
            return self.reference
        where = result.measured_on
        return self.references.setdefault(f"{where['host']} (node {where['node'][:8]}) GPU {','.join(where['gpus']) or '-'}", ReferenceBaseline())

    def _reference_notes(self) -> list[str]:
        return [f"{place}: {reference.note()}" for place, reference in self.references.items() if reference.note()]
