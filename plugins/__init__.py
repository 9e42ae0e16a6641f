"""Everything pluggable, registered by name: placement policies, gang sources, runtime handoffs."""
