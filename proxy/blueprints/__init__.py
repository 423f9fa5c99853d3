"""Flask blueprints, thin by design: the endpoint of every registered protocol (`completions`), the
endpoints each protocol declares beside it in the registry, served by kind (`messages`: local ones
like count_tokens; `responses_socket`: WebSockets; `responses_compact`: relayed ones like compact),
the stored responses (`responses`, from proxy.conversations), `models` and
`admin`; what every endpoint shares — request ids, auth, body parsing, errors — is `http`'s
(docs/architecture.md §2)."""
