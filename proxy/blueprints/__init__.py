"""Flask blueprints, thin by design: the endpoint of every registered protocol (`completions`), the
endpoints beside two of them (`messages`: count_tokens; `responses`: stored responses), `models` and
`admin`; what every endpoint shares — request ids, auth, body parsing, errors — is `http`'s, and
what every endpoint reads — the app's state, typed — is `state`'s (`AppState`, read through
`app_state()`) (docs/architecture.md §2, §13.1)."""
