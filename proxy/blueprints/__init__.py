"""Flask blueprints, one per protocol plus models and admin; thin by design (see `http`)."""
