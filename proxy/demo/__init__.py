"""The simulated upstream used by `llm-proxy demo` and by the tests, over a real socket."""
