"""Accounting: pricing, per-second billing, cost allocation to jobs, reports, budgets, FOCUS."""
