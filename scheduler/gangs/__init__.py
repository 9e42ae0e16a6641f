"""Gangs: membership, the reservation ledger, the queue, preemption, elastic sizes, spares, health, restart."""
