"""The account pool: which upstream account serves the next attempt, and what each one has done."""
