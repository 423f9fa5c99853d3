"""Flask blueprints, thin by design: the endpoint of every registered protocol (`completions`), the
endpoints each protocol declares beside it in the registry, served by kind (`messages`: local ones
like count_tokens; `responses_socket`: WebSockets; `responses_compact`: relayed ones like compact),
the stored responses (`responses`, from proxy.conversations), `models` and
`admin`; what every endpoint shares — request ids, auth, body parsing, errors — is `http`'s, and
what every endpoint reads — the app's state, typed — is `state`'s (`AppState`, read through
`app_state()`) (docs/architecture.md §2, §13.1)."""
