"""USD budgets of client keys and key groups: the worst case reserved when a request arrives,
settled to its real cost when it ends (docs/architecture.md §13.11)."""
