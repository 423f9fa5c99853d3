"""Who serves an upstream, as OpenTelemetry's GenAI conventions name providers (`gen_ai.provider.name`).

Owns the hosts that say who they are. An upstream at one of them is named by its host (an
OpenAI-compatible server at api.deepseek.com is `deepseek`); any other is named by the API it speaks
(`Protocol.provider`: an OpenAI-compatible server of unknown host is `openai`). Pure: a table and
its lookup.
"""

from __future__ import annotations

# Upstreams whose host says who they are, as the conventions name providers; any other upstream is
# named by the API it speaks (`Protocol.provider`: an OpenAI-compatible server is `openai`).
KNOWN_HOSTS = (("api.openai.com", "openai"), ("api.anthropic.com", "anthropic"),
               ("generativelanguage.googleapis.com", "gcp.gemini"), ("aiplatform.googleapis.com", "gcp.vertex_ai"),
               ("api.deepseek.com", "deepseek"), ("api.mistral.ai", "mistral_ai"), ("api.groq.com", "groq"),
               ("api.x.ai", "x_ai"), ("api.perplexity.ai", "perplexity"), ("api.cohere.com", "cohere"),
               (".openai.azure.com", "azure.ai.openai"), (".amazonaws.com", "aws.bedrock"))


def provider_at(host: str, spoken: str) -> str:
    """`gen_ai.provider.name` of an upstream at `host` that speaks the API whose provider is `spoken`."""
    for known, name in KNOWN_HOSTS:
        if host == known or (known.startswith(".") and host.endswith(known)):
            return name
    return spoken
