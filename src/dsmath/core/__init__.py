"""The bottom floor: stdlib-only helpers every layer may use (errors, code closure, worker pools)."""
