"""Room held for a partly bound gang's members that have a slot but no pod meshfit counts yet (`GangBinding` mixin).

A bound member deleted (evicted, its node lost, a fault) keeps its GPU slot in the ledger for the pod its controller
recreates (`ReservationLedger.hold_for_replacement`); pod 0 must come back to the very node its bound peers were given
as `meshfit.io/master-addr`.  The ledger holds GPUs only.  Until the replacement pod exists and is held, nothing else
counted the member's CPU, memory, pods or extended resources on that node, so kube-scheduler placed other pods into
that room (`/guard` found nothing held there) and the recreated pod 0 no longer fitted the one node it may use: the
gang stayed partly bound until rolled back (the 30-minute 1.35 soak, gang mg00851).

So a reserved slot of a gang that has a member bound, whose member no live pod held or bound by meshfit stands for,
is a *vacancy* (unless its pod is nominated there, which the fit checks count already): its requests are counted
on the slot's node like a held member's (in `in_flight_requests`, which `/guard`, `/filter` for lone GPU pods and
the other members' fit checks read) until the member's pod is held, in flight or bound, or the slot is released or
moves.  The requests are the deleted pod's own when meshfit saw it go;
otherwise (a restart, a member never created yet) the largest of its peers' requests, resource by resource.
"""

from __future__ import annotations

from typing import Any, Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.ledger import SLOT_RESERVED

VacancyKey = tuple[str, int]
"""(gang key, member index)."""


class MemberVacancies:
    """Vacancies of partly bound gangs; mixed into `GangBinding` (it provides `state`, `holds`, `in_flight` and
    `_count_on`)."""

    state: Any
    holds: dict
    in_flight: dict
    _count_on: Callable[[str, dict, int], None]

    def _init_vacancies(self) -> None:
        self.vacancies: dict[VacancyKey, tuple[str, dict[str, Any]]] = {}
        """(gang key, index) -> (node, requests) counted for a member slot no pod stands for yet."""
        self.gone_requests: dict[VacancyKey, dict[str, Any]] = {}
        """(gang key, index) -> requests of a deleted member, for its replacement's vacancy."""

    def member_gone(self, record: PodRecord) -> None:
        """The watch saw a gang member's pod go (under the lock, after the ledger held its slot for a replacement):
        its requests stay counted on the slot's node until the replacement is held there."""
        member = record.member
        if member is None:
            return
        if record.needs is not None and record.needs.requests:
            self.gone_requests[(member.gang_key, member.index)] = dict(record.needs.requests)
        self.refresh_vacancies(member.gang_key)

    def refresh_vacancies(self, gang_key: str) -> None:
        """Count exactly the vacancies `gang_key` has now (under the lock)."""
        wanted = self._wanted_vacancies(gang_key)
        for key in [k for k in self.vacancies if k[0] == gang_key and self.vacancies[k] != wanted.get(k)]:
            node, requests = self.vacancies.pop(key)
            self._count_on(node, requests, -1)
        for key, (node, requests) in wanted.items():
            if key not in self.vacancies:
                self.vacancies[key] = (node, requests)
                self._count_on(node, requests, +1)
        entry = self.state.ledger.get(gang_key)
        for key in [k for k in self.gone_requests if k[0] == gang_key]:
            slot = entry.slots.get(key[1]) if entry is not None else None
            if slot is None or slot.state != SLOT_RESERVED:  # its replacement is bound, or the slot went
                del self.gone_requests[key]

    def refresh_all_vacancies(self) -> None:
        """`refresh_vacancies` for every gang that has or may have one (the periodic pass)."""
        keys = {key for key, _ in self.vacancies} | {key for key, _ in self.gone_requests}
        keys.update(key for key, entry in self.state.ledger.entries.items()
                    if entry.has_bound() and any(s.state == SLOT_RESERVED for s in entry.slots.values()))
        for key in sorted(keys):
            self.refresh_vacancies(key)

    def _vacate(self, record: PodRecord) -> None:
        """`record`'s own requests are counted now: its slot's vacancy, if any, no longer is."""
        held = self.vacancies.pop((record.member.gang_key, record.member.index), None)
        if held is not None:
            self._count_on(held[0], held[1], -1)

    def vacancy_of(self, record: PodRecord, node: str) -> dict[str, Any]:
        """The requests counted on `node` for `record`'s own slot while no pod stood for it ({} when none)."""
        member = record.member
        held = self.vacancies.get((member.gang_key, member.index)) if member is not None else None
        return held[1] if held is not None and held[0] == node else {}

    def _wanted_vacancies(self, gang_key: str) -> dict[VacancyKey, tuple[str, dict[str, Any]]]:
        entry = self.state.ledger.get(gang_key)
        if entry is None or not entry.has_bound():
            return {}
        members = [r for r in self.state.gang_index.get(gang_key, {}).values()
                   if r.member is not None and not r.terminating]
        counted = {r.member.index for r in members if r.node or r.uid in self.holds or r.uid in self.in_flight}
        nominated = {r.member.index: r.nominated for r in members if r.nominated and not r.node}
        wanted, peers = {}, None
        for index, slot in entry.slots.items():
            if slot.state != SLOT_RESERVED or index in counted or nominated.get(index) == slot.node:
                continue  # a pod nominated there is counted by the fit checks already (`state.nominated_to`)
            requests = self.gone_requests.get((gang_key, index))
            if requests is None:
                peers = _largest_requests(members) if peers is None else peers
                requests = peers
            if requests:
                wanted[(gang_key, index)] = (slot.node, requests)
        return wanted


def _largest_requests(records: list[PodRecord]) -> dict[str, Any]:
    """Resource by resource, the largest request among `records` (those whose needs are known)."""
    largest: dict[str, Any] = {}
    for record in records:
        if record.needs is None:
            continue
        for resource, value in record.needs.requests.items():
            if value > largest.get(resource, 0):
                largest[resource] = value
    return largest
