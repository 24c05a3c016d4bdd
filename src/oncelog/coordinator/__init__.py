"""Coordinators: producer ids and (later) transactions and consumer groups."""
