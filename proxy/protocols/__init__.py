"""Wire-protocol codecs, one package per protocol: chat_completions, messages, responses."""
