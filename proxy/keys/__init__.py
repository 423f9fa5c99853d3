"""Client and admin keys managed at runtime: issued, rotated, expired, disabled and revoked through
the admin API and the CLI, shared by every worker and host, with an audit trail."""
