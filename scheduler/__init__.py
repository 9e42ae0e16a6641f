"""The core: jobs and gangs, placement engine, rank layout, cost model, reservations, service, CLI."""
